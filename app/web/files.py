"""The page's static files: each revalidated before reuse, large ones sent gzipped."""

from __future__ import annotations

import os
from pathlib import Path

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.responses import FileResponse, Response
from starlette.staticfiles import NotModifiedResponse, PathLike, StaticFiles
from starlette.types import Scope


class PageFiles(StaticFiles):
    """``StaticFiles`` that sends ``NAME.gz`` (made beside ``NAME`` with ``gzip -9 -n -k``) in
    place of ``NAME`` to a client that accepts gzip, with its own ``ETag`` and
    ``Content-Length``; and ``Cache-Control: no-cache`` with every file: a vendored file keeps
    its name across versions, so a browser asks (``If-None-Match``, answered 304) before
    reusing its copy. The ``.gz`` files are found at start-up and never served as themselves.
    """

    def __init__(self, directory: Path) -> None:
        super().__init__(directory=directory)
        # Real paths, as lookup_path gives them: NAME -> NAME.gz.
        self.gzipped = {
            os.path.realpath(p.with_suffix("")): os.path.realpath(p)
            for p in directory.rglob("*.gz")
        }

    def file_response(
        self,
        full_path: PathLike,
        stat_result: os.stat_result,
        scope: Scope,
        status_code: int = 200,
    ) -> Response:
        path = str(full_path)
        if path in self.gzipped.values():
            raise HTTPException(status_code=404)
        request = Headers(scope=scope)
        headers = {"Cache-Control": "no-cache"}
        gzipped = self.gzipped.get(path)
        if gzipped is not None:
            headers["Vary"] = "Accept-Encoding"
        response = FileResponse(path, status_code, headers, stat_result=stat_result)
        if gzipped is not None and _accepts_gzip(request):
            response = FileResponse(
                gzipped,
                status_code,
                {**headers, "Content-Encoding": "gzip"},
                media_type=response.media_type,
                stat_result=os.stat(gzipped),  # a local file's stat: microseconds, on the loop
            )
        if self.is_not_modified(response.headers, request):
            return NotModifiedResponse(response.headers)
        return response


def _accepts_gzip(request: Headers) -> bool:
    """Whether ``Accept-Encoding`` takes gzip: named, or ``*``, without ``q=0``."""
    weights: dict[str, float] = {}
    for item in request.get("accept-encoding", "").split(","):
        name, *params = (part.strip().lower() for part in item.split(";"))
        weights[name] = 1.0
        for param in params:
            if param.startswith("q="):
                try:
                    weights[name] = float(param[2:])
                except ValueError:
                    weights[name] = 0.0
    return weights.get("gzip", weights.get("*", 0.0)) > 0
