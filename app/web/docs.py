"""The API's documentation page, ``/docs`` (Swagger UI), from the vendored copy in
``static/vendor/``: nothing is loaded from a CDN."""

from __future__ import annotations

import base64
import hashlib
import re

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse

VENDOR = "/static/vendor"

# Swagger UI's page starts it with an inline script: that script, by its hash, and no other.
CSP = (
    "default-src 'self'; script-src 'self' {scripts}; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data: blob:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
    "frame-ancestors 'none'"
)
INLINE_SCRIPT = re.compile(r"<script(?![^>]*\ssrc=)[^>]*>(.*?)</script>", re.DOTALL)


def mount_docs(app: FastAPI) -> None:
    """Serve ``/docs`` for the app's OpenAPI document (its own ``docs_url`` set to None)."""
    if app.openapi_url is None:
        return
    page = get_swagger_ui_html(
        openapi_url=app.openapi_url,
        title=f"{app.title} - Swagger UI",
        swagger_js_url=f"{VENDOR}/swagger-ui-bundle.js",
        swagger_css_url=f"{VENDOR}/swagger-ui.css",
        swagger_favicon_url="/static/icon.svg",
        swagger_ui_parameters=app.swagger_ui_parameters,
    )
    body = bytes(page.body)
    headers = {"Content-Security-Policy": docs_csp(body.decode())}

    @app.get("/docs", include_in_schema=False)
    @app.head("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return HTMLResponse(body, headers=headers)


def docs_csp(html: str) -> str:
    """The Content-Security-Policy that lets ``html``'s inline scripts run, and no others."""
    hashes = (hashlib.sha256(script.encode()).digest() for script in INLINE_SCRIPT.findall(html))
    return CSP.format(scripts=" ".join(f"'sha256-{base64.b64encode(h).decode()}'" for h in hashes))
