"""HTTP errors: OpenAI-style bodies with a stable code, raised only in the routes layer."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import iter_route_contexts
from pydantic import BaseModel, Field
from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import DEFAULT_MAX_HEADER_SIZE
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from agents.errors import (
    AlreadyDecided,
    AttachmentNotFound,
    AttachmentRejected,
    BadInputs,
    CheckpointNotFound,
    DependencyUnavailable,
    HandlersBusy,
    InvalidTurn,
    KeyReused,
    ModelError,
    NoModelConfigured,
    NothingToResume,
    RunNotFound,
    RunStatusConflict,
    ShuttingDown,
    SkilldeskError,
    SkillNotFound,
    SkillReferenceError,
    ThreadBusy,
    ThreadNotFound,
    WorkflowNotFound,
)
from app.api.sse import CutOff
from app.api.validation import not_json, not_sent_as_json, problems

log = structlog.get_logger(__name__)
MAX_PART_HEADER = DEFAULT_MAX_HEADER_SIZE  # what Starlette's parser allows a part's header

REDIS_LOST = (
    "Redis (SKILLDESK_REDIS_URL) is unreachable, so this request could not be completed; "
    "try again shortly. /readyz answers 503 until it is back."
)
# The 503 every operation behind the gate documents (``app.api.openapi.as_served``).
REDIS_LOST_DOC = (
    "Redis (`SKILLDESK_REDIS_URL`, when set: every key's rate limit is counted there, "
    "idempotency keys and runs' events are kept there) is unreachable "
    "(`dependency_unavailable`): the request was not done; try again shortly."
)

# The one place where an error of the agents gets its HTTP status: by class, most specific
# first, then (for a run that failed, which reports a code) by code.
_BY_CLASS: tuple[tuple[type[SkilldeskError], int, str], ...] = (
    (InvalidTurn, 400, "invalid_request_error"),
    (BadInputs, 400, "invalid_request_error"),
    (SkillNotFound, 404, "invalid_request_error"),
    (RunNotFound, 404, "invalid_request_error"),
    (WorkflowNotFound, 404, "invalid_request_error"),
    (AlreadyDecided, 409, "invalid_request_error"),
    (RunStatusConflict, 409, "invalid_request_error"),
    (KeyReused, 409, "invalid_request_error"),
    (ThreadNotFound, 404, "invalid_request_error"),
    (CheckpointNotFound, 404, "invalid_request_error"),
    (AttachmentNotFound, 404, "invalid_request_error"),
    (NothingToResume, 409, "invalid_request_error"),
    (ThreadBusy, 409, "invalid_request_error"),
    (AttachmentRejected, 415, "invalid_request_error"),
    (SkillReferenceError, 404, "invalid_request_error"),
    (HandlersBusy, 503, "server_error"),
    (ShuttingDown, 503, "server_error"),
    (DependencyUnavailable, 503, "server_error"),
    (NoModelConfigured, 503, "model_error"),
    (ModelError, 502, "model_error"),
    (SkilldeskError, 500, "server_error"),
)
_BY_CODE = {
    "attachment_too_large": 413,
    "model_timeout": 504,
    "no_model_configured": 503,
    "run_cancelled": 503,
    "thread_taken_over": 409,
    "config_error": 500,
}


class ErrorDetail(BaseModel):
    """What went wrong, as OpenAI's error object carries it."""

    message: str = Field(description="What went wrong and, where it helps, how to fix it.")
    type: str = Field(
        description="The kind of error: `invalid_request_error` (the client's), "
        "`model_error` (the language model failed) or `server_error`.",
        examples=["invalid_request_error"],
    )
    code: str = Field(
        description="A stable code to branch on, e.g. `invalid_request`, `invalid_json`, "
        "`no_new_message`, `unknown_skill`, `thread_not_found`, `request_too_large`, "
        "`model_unavailable`, `model_timeout`, `internal_error`.",
        examples=["invalid_request"],
    )
    param: str | None = Field(
        description="The offending field, dotted (`messages.0.content`), or query or path "
        "parameter or header, named as sent (`limit`, `thread_id`, `Idempotency-Key`), or null.",
        examples=["messages.0.role"],
    )


class ErrorResponse(BaseModel):
    """Every error body: ``{"error": {"message", "type", "code", "param"}}``."""

    error: ErrorDetail


ERROR_STATUSES = {
    400: "The request is malformed: not JSON, a field against the schema (`invalid_request`, "
    "`param` names it), or a value the service refuses (its own `code`).",
    401: "No API key, or one that is not valid (`missing_credentials`, `invalid_api_key`, "
    "`api_key_expired`, `api_key_revoked`, `invalid_token`); `WWW-Authenticate` carries the "
    "Bearer challenge.",
    403: "The key lacks the scope this needs (`insufficient_scope`).",
    404: "The resource does not exist.",
    409: "The request conflicts with the resource's state (an approval decided already).",
    413: "The request body is larger than `SKILLDESK_MAX_REQUEST_BYTES` (`request_too_large`).",
    415: "The file's type is not accepted, or its content is not of its type.",
    429: "Too many requests with this key this minute (`rate_limited`), or its runs used their "
    "tokens (`token_rate_limited`); `Retry-After` says when to try again.",
    500: "An internal error; the request was not completed and the error is logged "
    "(`internal_error`).",
    502: "The language model failed after its retries and fallbacks (`model_error`; the "
    "message says what to check).",
    503: "No language model is configured (`no_model_configured`).",
    504: "The language model timed out after its retries and fallbacks (`model_timeout`).",
}


def error_responses(
    *statuses: int, notes: Mapping[int, str] | None = None
) -> dict[int | str, dict[str, Any]]:
    """A route's documented error statuses, each answered with ``ErrorResponse``.

    ``notes`` replace the generic description of a status with what this route means by it.
    """
    notes = notes or {}
    return {
        status: {"model": ErrorResponse, "description": notes.get(status, ERROR_STATUSES[status])}
        for status in statuses
    }


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
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.type, self.param = (
            status,
            code,
            message,
            type_,
            param,
        )
        self.headers = headers

    def body(self) -> dict[str, Any]:
        """The OpenAI-style error body."""
        return error_body(self.message, self.type, self.code, self.param)


def error_body(message: str, type_: str, code: str, param: str | None = None) -> dict[str, Any]:
    """``{"error": {"message", "type", "code", "param"}}`` as OpenAI clients read it."""
    return {"error": {"message": message, "type": type_, "code": code, "param": param}}


def api_error(exc: SkilldeskError) -> ApiError:
    """An error of the agents as the HTTP error it answers."""
    status, kind = next((s, k) for cls, s, k in _BY_CLASS if isinstance(exc, cls))
    status = _BY_CODE.get(exc.code, status)
    return ApiError(status, exc.code, exc.message, type_=kind, param=getattr(exc, "param", None))


INTERNAL = "Internal error; the request was not completed. It has been logged."


def error_of(exc: Exception) -> ApiError:
    """Any exception as the HTTP error it answers: an error of the agents by its class,
    Redis gone as ``dependency_unavailable``, anything else ``internal_error``."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, SkilldeskError):
        return api_error(exc)
    if isinstance(exc, RedisConnectionError | RedisTimeoutError):
        return api_error(DependencyUnavailable(REDIS_LOST))
    return ApiError(500, "internal_error", INTERNAL, type_="server_error")


def model_error(code: str, message: str, headers: dict[str, str] | None = None) -> ApiError:
    """A failed run (its code: a model failure, mostly) as an ApiError; 502 unless the code
    says otherwise. ``headers``: the run's thread and id, so the client finds the thread that
    keeps its message."""
    return ApiError(_BY_CODE.get(code, 502), code, message, type_="model_error", headers=headers)


def install_error_handlers(app: FastAPI) -> None:
    """Every error leaves as the same JSON shape."""

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)

    @app.exception_handler(SkilldeskError)
    async def _agents_error(_: Request, exc: SkilldeskError) -> JSONResponse:
        error = api_error(exc)
        if error.status >= 500:
            log.error("http.agents_error", code=exc.code, error=exc.message)
        return JSONResponse(error.body(), status_code=error.status)

    @app.exception_handler(RedisConnectionError)
    @app.exception_handler(RedisTimeoutError)
    async def _redis_lost(_: Request, exc: Exception) -> JSONResponse:
        # Redis went away under a request (the rate limit, an idempotency key, a run's
        # events): a 503 the client may retry, not an internal error.
        log.error("http.redis_unreachable", error=str(exc))
        error = error_of(exc)
        return JSONResponse(error.body(), status_code=error.status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        unread = not_sent_as_json(request, errors)
        if unread is not None:
            body = error_body(unread, "invalid_request_error", "invalid_content_type")
            return JSONResponse(body, status_code=400)
        detail = next((err for err in errors if err.get("type") == "json_invalid"), None)
        if detail is not None:
            body = error_body(not_json(detail, exc.body), "invalid_request_error", "invalid_json")
            return JSONResponse(body, status_code=400)
        found = problems(errors, exc.body)
        first = found[0] if found else None
        # A user's message over the limit: the code chat completions gives it too.
        too_long = (
            first is not None
            and (first.param or "").rpartition(".")[2] == "message"
            and first.type == "string_too_long"
        )
        body = error_body(
            "Invalid request: " + "; ".join(p.text for p in found),
            "invalid_request_error",
            "message_too_long" if too_long else "invalid_request",
            first.param if first is not None else None,
        )
        return JSONResponse(body, status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}.get(
            exc.status_code, "http_error"
        )
        message = str(exc.detail)
        if exc.status_code == 400 and message == "There was an error parsing the body":
            # FastAPI tells no more than that (the parser's error is not kept): every cause.
            code, message = (
                "invalid_json",
                "The request body is not valid JSON in UTF-8, nests arrays and objects "
                "deeper than JSON parsers allow (about 1,000 levels), or holds an integer of "
                "more than 4,300 digits.",
            )
        if exc.status_code == 400 and message == "Invalid multipart data.":
            code, message = "invalid_multipart", _multipart_problem(exc)
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            headers["Allow"] = allowed_methods(request)
        return JSONResponse(
            error_body(message, "invalid_request_error", code),
            status_code=exc.status_code,
            headers=headers or None,
        )

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("http.unhandled_error")
        error = error_of(exc)
        return JSONResponse(error.body(), status_code=error.status)


def _multipart_problem(exc: BaseException) -> str:
    """What the multipart parser found wrong (Starlette says "Invalid multipart data." and
    keeps the parser's error only as the cause of its own)."""
    seen: BaseException | None = exc
    while seen is not None and not isinstance(seen, MultipartParseError):
        seen = seen.__cause__ or seen.__context__  # HTTPException <- MultiPartException <- it
    if seen is None:
        return "The request body is not valid multipart/form-data."
    if "header size" in str(seen):
        return (
            "The multipart body has a part whose header line is longer than "
            f"{MAX_PART_HEADER:,} bytes (the parser's limit); a long file name is the usual "
            "cause: send a shorter one."
        )
    return f"The request body is not valid multipart/form-data: {seen}."


def allowed_methods(request: Request) -> str:
    """The ``Allow`` header of a 405 (RFC 9110): every method of every route on the path,
    not only those of the first route Starlette tried."""
    methods: set[str] = set()
    for route in iter_route_contexts(request.app.routes):
        match, _ = route.matches(request.scope)
        if match is not Match.NONE:
            methods |= route.methods or set()
    return ", ".join(sorted(methods))


CUT_OFF = (
    "This process stopped during the request (`shutting_down`): the message says whether a "
    "workflow run goes on in another process (naming it) or the request is to be sent again."
)


@contextlib.contextmanager
def handed_over(services: Any, run_ids: list[str]) -> Iterator[None]:
    """A request driving a workflow run that the process's stop cuts off (its grace period
    over: uvicorn cancels the request) answers 503 ``shutting_down`` rather than a bare 500:
    naming the run, which another process resumes from its last step, once it is under way
    (``run_ids``, filled when it is), else saying the request changed nothing."""
    try:
        yield
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if services.conversations.stopping is None or task is None:
            raise
        task.uncancel()  # the request answers; its run was let go (WorkflowEngine.aclose)
        raise _cut_off(run_ids) from None
    except CutOff:  # its run, detached (``Cutoffs.detached``), was cut off and let go
        raise _cut_off(run_ids) from None


def _cut_off(run_ids: list[str]) -> Exception:
    """What a request answers whose workflow run the process's stop cut off."""
    if not run_ids:
        return ShuttingDown(
            "This service process stopped before the request was done; nothing was "
            "changed: send it again."
        )
    # Not to be sent again (a client that retries a 503 would start a second run and its
    # side effects): the run goes on, named in the headers too.
    headers = {"X-Run-Id": run_ids[-1], "X-Should-Retry": "false"}
    return ApiError(
        503, "shutting_down", cut_off_message(run_ids[-1]), type_="server_error", headers=headers
    )


def cut_off_message(run_id: str) -> str:
    """What a client is told of a workflow run its process stopped before it ended."""
    return (
        f"This service process stopped during workflow run {run_id}; another process (or "
        "this one when it starts again) goes on with it from its last step: "
        f"GET /v1/workflow-runs/{run_id} for its record."
    )
