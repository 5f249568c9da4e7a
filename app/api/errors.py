"""HTTP errors: OpenAI-style bodies with a stable code, raised only in the routes layer."""

from __future__ import annotations

from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

log = structlog.get_logger(__name__)

_MODEL_STATUS = {"model_timeout": 504, "no_model_configured": 503, "config_error": 500}


class ApiError(Exception):
    """An error answered as ``{"error": {...}}`` with an HTTP status."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        type_: str = "invalid_request_error",
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.type, self.param = (
            status,
            code,
            message,
            type_,
            param,
        )

    def body(self) -> dict[str, Any]:
        """The OpenAI-style error body."""
        return error_body(self.message, self.type, self.code, self.param)


def error_body(message: str, type_: str, code: str, param: str | None = None) -> dict[str, Any]:
    """``{"error": {"message", "type", "code", "param"}}`` as OpenAI clients read it."""
    return {"error": {"message": message, "type": type_, "code": code, "param": param}}


def model_error(code: str, message: str) -> ApiError:
    """A failed model call as an ApiError (502 unless the code says otherwise)."""
    return ApiError(_MODEL_STATUS.get(code, 502), code, message, type_="model_error")


def install_error_handlers(app: FastAPI) -> None:
    """Every error leaves as the same JSON shape."""

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        detail = next((err for err in errors if err.get("type") == "json_invalid"), None)
        if detail is not None:
            reason = (detail.get("ctx") or {}).get("error", "")
            body = error_body(
                f"The request body is not valid JSON{f' ({reason})' if reason else ''}.",
                "invalid_request_error",
                "invalid_json",
            )
            return JSONResponse(body, status_code=400)
        parts = []
        for err in errors:
            loc = [str(p) for p in err.get("loc", ()) if p != "body"]
            parts.append(f"{'.'.join(loc) or 'body'}: {err.get('msg')}")
        first = [str(p) for p in errors[0].get("loc", ()) if p != "body"] if errors else []
        body = error_body(
            "Invalid request: " + "; ".join(parts),
            "invalid_request_error",
            "invalid_request",
            ".".join(first) or None,
        )
        return JSONResponse(body, status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}.get(
            exc.status_code, "http_error"
        )
        message = str(exc.detail)
        if exc.status_code == 400 and message == "There was an error parsing the body":
            code, message = "invalid_json", "The request body is not valid JSON (UTF-8)."
        return JSONResponse(
            error_body(message, "invalid_request_error", code), status_code=exc.status_code
        )

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("http.unhandled_error")
        return JSONResponse(
            error_body(
                "Internal error; the request was not completed. It has been logged.",
                "server_error",
                "internal_error",
            ),
            status_code=500,
        )
