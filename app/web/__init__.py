"""The web page: static files (no build step) served by the service at ``/``, and the API's
documentation page at ``/docs``."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import Response

from app.web.docs import mount_docs
from app.web.files import PageFiles

STATIC = Path(__file__).parent / "static"

# Scripts only from this origin (the vendored ones included), never inline: an HTML string that
# slipped past the Markdown sanitiser still could not run. Mermaid's SVG carries inline styles.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data: blob:; media-src 'self' blob:; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
)


def mount(app: FastAPI) -> None:
    """Serve the page at ``/``, its files under ``/static/`` and the API's docs at ``/docs``."""
    files = PageFiles(STATIC)

    @app.get("/", include_in_schema=False)
    @app.head("/", include_in_schema=False)  # uptime checks ask with HEAD
    async def index(request: Request) -> Response:
        # As a static file: no-cache, and 304 to an If-None-Match that matches.
        response = await files.get_response("index.html", request.scope)
        response.headers["Content-Security-Policy"] = CSP
        return response

    app.mount("/static", files, name="static")
    mount_docs(app)
