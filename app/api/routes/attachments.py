"""A thread's files: uploaded, listed and read back (the model sees names and captions)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Depends, File, Form, Path, Request, UploadFile
from fastapi.responses import FileResponse, JSONResponse
from starlette.datastructures import UploadFile as SentFile

from agents.errors import AttachmentNotFound, ThreadNotFound
from agents.state.attachments import media_type_of
from app.api.deps import PrincipalDep, ServicesDep, reach_thread
from app.api.errors import ApiError, error_responses
from app.api.patterns import ATTACHMENT_ID
from app.api.routes.threads import NO_THREAD, ThreadId
from app.api.schemas.thread_view import AttachmentPublic

router = APIRouter(prefix="/v1/threads", tags=["threads"], default_response_class=JSONResponse)
UPLOAD_CHUNK = 64 * 1024
HOW = "curl: -F file=@path/to/file, and -F caption=... for a caption"


async def sent_as_upload(request: Request) -> None:
    """A 400 that says how to send a file, for a body that is not ``multipart/form-data``
    or holds no file in its ``file`` field (FastAPI would say "file: Field required")."""
    sent = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if sent != "multipart/form-data":
        how = f"with Content-Type {sent!r}" if sent else "without a Content-Type"
        raise ApiError(
            400,
            "invalid_content_type",
            f"The upload came {how}: send it as multipart/form-data with the file in the "
            f"`file` field ({HOW}).",
            param="file",
        )
    form = await request.form()  # parsed already, for the route: read again from its cache
    if not isinstance(form.get("file"), SentFile):
        what = "holds text, not a file" if "file" in form else "is missing"
        raise ApiError(
            400,
            "invalid_request",
            f"The upload's `file` field {what}: send the file in a multipart field named "
            f"`file` ({HOW}; the @ sends the file's bytes).",
            param="file",
        )


@router.post(
    "/{thread_id}/attachments",
    status_code=201,
    dependencies=[Depends(sent_as_upload)],
    responses=error_responses(
        400,
        404,
        413,
        415,
        500,
        notes={
            400: "Not `multipart/form-data` (`invalid_content_type`), no file in its `file` "
            "field, or a body the multipart parser refuses (`invalid_multipart`).",
            404: NO_THREAD,
            413: "Larger than the attachment limit (`attachment_too_large`).",
            415: "A type not accepted, or content that is not of its type "
            "(`unsupported_media_type`, `media_type_mismatch`).",
        },
    ),
)
async def upload_attachment(
    services: ServicesDep,
    principal: PrincipalDep,
    thread_id: ThreadId,
    file: Annotated[UploadFile, File(description="The file (multipart form field `file`).")],
    caption: Annotated[str, Form(max_length=500, description="What it is.")] = "",
) -> AttachmentPublic:
    """Attach a file to the thread. The model sees its name and caption, never its bytes."""
    await reach_thread(services, principal, thread_id)
    name = _sent_name(file.filename or "")
    media_type = (file.content_type or "").split(";")[0].strip().lower()
    if not media_type or media_type == "application/octet-stream":
        media_type = media_type_of(name)

    async def chunks() -> AsyncIterator[bytes]:
        while chunk := await file.read(UPLOAD_CHUNK):
            yield chunk

    attachment = await services.threads.attach(
        thread_id,
        name=name or "upload",
        media_type=media_type,
        chunks=chunks(),
        caption=caption,
    )
    return AttachmentPublic.of(thread_id, attachment)


@router.get(
    "/{thread_id}/attachments", responses=error_responses(400, 404, 500, notes={404: NO_THREAD})
)
async def list_attachments(
    services: ServicesDep, principal: PrincipalDep, thread_id: ThreadId
) -> list[AttachmentPublic]:
    """The thread's files, oldest first."""
    await reach_thread(services, principal, thread_id)
    await services.threads.get(thread_id)
    found = await services.attachments.of_thread(thread_id)
    return [AttachmentPublic.of(thread_id, a) for a in found]


@router.get(
    "/{thread_id}/attachments/{attachment_id}",
    response_class=FileResponse,
    responses={
        200: {"description": "The file, with its media type.", "content": {"*/*": {}}},
        **error_responses(400, 404, 500, notes={404: "No such attachment."}),
    },
)
async def get_attachment(
    services: ServicesDep,
    principal: PrincipalDep,
    thread_id: ThreadId,
    attachment_id: Annotated[str, Path(pattern=ATTACHMENT_ID)],
) -> FileResponse:
    """One file of the thread."""
    try:
        await reach_thread(services, principal, thread_id)
    except ThreadNotFound:  # as for any attachment not there
        raise AttachmentNotFound(
            f"thread {thread_id!r} has no attachment {attachment_id!r}"
        ) from None
    found = await services.attachments.get(thread_id, attachment_id)
    if found is None:
        raise AttachmentNotFound(f"thread {thread_id!r} has no attachment {attachment_id!r}")
    attachment, path = found
    return FileResponse(
        path,
        media_type=attachment.get("media_type"),
        filename=attachment.get("name"),
        content_disposition_type="inline",
    )


# How browsers escape a file name in multipart/form-data (WHATWG HTML): only these three.
_NAME_ESCAPES = re.compile("%22|%0D|%0A")
_UNESCAPED = {"%22": '"', "%0D": "\r", "%0A": "\n"}


def _sent_name(name: str) -> str:
    """An uploaded file's name as the user's file has it: a browser sends ``"`` as ``%22``
    and CR, LF as ``%0D``, ``%0A`` (and nothing else escaped, so ``%`` comes as it is)."""
    return _NAME_ESCAPES.sub(lambda m: _UNESCAPED[m.group()], name)
