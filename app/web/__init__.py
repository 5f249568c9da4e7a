"""The web page: static files (no build step) served by the service at ``/``."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

STATIC = Path(__file__).parent / "static"

# Scripts only from this origin (the vendored ones included), never inline: an HTML string that
# slipped past the Markdown sanitiser still could not run. Mermaid's SVG carries inline styles.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data: blob:; media-src 'self' blob:; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
)


def mount(app: FastAPI) -> None:
    """Serve the page at ``/`` and its files under ``/static/``."""

    @app.get("/", include_in_schema=False)
    @app.head("/", include_in_schema=False)  # uptime checks ask with HEAD
    async def index() -> FileResponse:
        return FileResponse(
            STATIC / "index.html",
            headers={"Cache-Control": "no-cache", "Content-Security-Policy": CSP},
        )

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
