"""Attachments: files of a thread (uploaded, or made by a skill), kept under the data
directory, described by a document beside the checkpoints, and referenced from thread state
by id. The bytes never enter state or a prompt: the model reads a file's name and caption.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from agents.errors import AttachmentRejected
from agents.state.documents import Documents
from agents.state.schema import Attachment

ATTACHMENT = "attachment"

# Media types accepted by default, and how to recognise a file's real type by its first
# bytes (None: text, which must be UTF-8 without NUL bytes).
_SIGNATURES: dict[str, tuple[bytes, ...] | None] = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
    "image/webp": (b"RIFF",),  # and "WEBP" at 8 (``_riff``)
    "application/pdf": (b"%PDF-",),
    "audio/wav": (b"RIFF",),
    "audio/x-wav": (b"RIFF",),
    "audio/mpeg": (b"ID3", b"\xff\xfb", b"\xff\xf3", b"\xff\xf2"),
    "text/plain": None,
    "text/markdown": None,
    "text/csv": None,
    "application/json": None,
}
DEFAULT_TYPES = tuple(_SIGNATURES)
_BY_SUFFIX = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
    ".pdf": "application/pdf",
    ".wav": "audio/wav",
    ".mp3": "audio/mpeg",
    ".txt": "text/plain",
    ".md": "text/markdown",
    ".csv": "text/csv",
    ".json": "application/json",
}


def media_type_of(name: str) -> str:
    """A file's media type from its name (``application/octet-stream`` when unknown)."""
    return _BY_SUFFIX.get(Path(name).suffix.lower(), "application/octet-stream")


def check_content(media_type: str, head: bytes, accepted: tuple[str, ...]) -> None:
    """Refuse a type not accepted, or a file whose first bytes contradict its type.

    Raises:
        AttachmentRejected: naming the type and what the file looks like instead.
    """
    if media_type not in accepted:
        raise AttachmentRejected(
            f"files of type {media_type!r} are not accepted; accepted: {', '.join(accepted)}",
            code="unsupported_media_type",
        )
    signatures = _SIGNATURES.get(media_type)
    if signatures is None and media_type in _SIGNATURES:
        if not _is_text(head):
            raise AttachmentRejected(
                f"the file is declared {media_type} but is not UTF-8 text",
                code="media_type_mismatch",
            )
    elif signatures and not (head.startswith(signatures) and _riff(media_type, head)):
        raise AttachmentRejected(
            f"the file is declared {media_type} but its content is not of that type",
            code="media_type_mismatch",
        )


def _is_text(head: bytes) -> bool:
    if b"\x00" in head:
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:  # a character cut at the end of the sniffed bytes is fine
        return exc.reason == "unexpected end of data"
    return True


def _riff(media_type: str, head: bytes) -> bool:
    """A RIFF file's form type matches (WAVE for audio, WEBP for images)."""
    form = {"image/webp": b"WEBP", "audio/wav": b"WAVE", "audio/x-wav": b"WAVE"}.get(media_type)
    return form is None or head[8:12] == form


@dataclass(frozen=True)
class AttachmentOptions:
    """Where attachments live and what is accepted."""

    directory: Path
    max_bytes: int = 10 * 1024 * 1024
    media_types: tuple[str, ...] = DEFAULT_TYPES


class AttachmentStore:
    """Attachments of every thread: files under ``directory/<thread>/``, described in the
    documents table (kind ``attachment``, owner: the thread)."""

    def __init__(self, documents: Documents, options: AttachmentOptions) -> None:
        self.documents = documents
        self.options = options
        # Threads a skill made files for since their state last took them in (``fresh``).
        self._fresh: set[str] = set()

    def fresh(self, thread_id: str) -> bool:
        """Whether a skill made files for the thread in this process since the last call
        (a run asks once at its end, instead of reading the thread's attachments)."""
        if thread_id in self._fresh:
            self._fresh.discard(thread_id)
            return True
        return False

    async def save(
        self,
        thread_id: str,
        *,
        name: str,
        media_type: str,
        chunks: Any,
        caption: str = "",
        kind: str = "upload",
    ) -> Attachment:
        """Store an upload read from ``chunks`` (an async iterator of bytes), checking its
        size and type as it arrives; nothing is kept of a refused file.

        Raises:
            AttachmentRejected: too large, not accepted, or not what its type says.
        """
        aid = f"att_{uuid.uuid4().hex[:20]}"
        folder = self._folder(thread_id)
        await asyncio.to_thread(folder.mkdir, parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=folder, prefix=".upload-")
        size, head, checked = 0, b"", False
        try:
            with os.fdopen(fd, "wb") as out:
                async for chunk in chunks:
                    if not checked:  # refused at its first bytes, not after a large upload
                        head += chunk[: 512 - len(head)]
                        if len(head) >= 512:
                            check_content(media_type, head, self.options.media_types)
                            checked = True
                    size += len(chunk)
                    if size > self.options.max_bytes:
                        raise AttachmentRejected(
                            f"the file is larger than {_size(self.options.max_bytes)}, the "
                            "most this service takes",
                            code="attachment_too_large",
                        )
                    await asyncio.to_thread(out.write, chunk)
            if not checked:
                check_content(media_type, head, self.options.media_types)
            target = folder / aid
            os.replace(temp, target)
        except BaseException:
            await asyncio.to_thread(Path(temp).unlink, missing_ok=True)
            raise
        return await self._describe(thread_id, aid, target, name, media_type, size, caption, kind)

    async def adopt(
        self, thread_id: str, source: Path, *, key: str, caption: str = "", run_id: str = ""
    ) -> Attachment:
        """Make a file a skill wrote an attachment of the thread (a copy, hard-linked when
        the filesystem allows). The same ``key`` (the call's idempotency key) gives the
        same attachment, so a replayed call does not add another."""
        aid = "att_" + hashlib.sha256(f"{key}|{source.name}".encode()).hexdigest()[:20]
        self._fresh.add(thread_id)
        existing = await self.documents.get(ATTACHMENT, aid)
        if existing is not None:
            return _public(existing)
        folder = self._folder(thread_id)
        target = folder / aid

        def copy() -> int:
            folder.mkdir(parents=True, exist_ok=True)
            try:
                os.link(source, target)
            except OSError:
                shutil.copyfile(source, target)
            return target.stat().st_size

        size = await asyncio.to_thread(copy)
        media_type = media_type_of(source.name)
        return await self._describe(
            thread_id, aid, target, source.name, media_type, size, caption, "generated", run_id
        )

    async def get(self, thread_id: str, aid: str) -> tuple[Attachment, Path] | None:
        """An attachment of the thread and its file, or None."""
        doc = await self.documents.get(ATTACHMENT, aid)
        if doc is None or doc.get("thread_id") != thread_id:
            return None
        path = self._folder(thread_id) / aid
        return (_public(doc), path) if path.is_file() else None

    async def of_thread(self, thread_id: str) -> list[Attachment]:
        """The thread's attachments, oldest first."""
        docs = await self.documents.find(ATTACHMENT, owner=thread_id, limit=10_000)
        return [_public(d) for d in sorted(docs, key=lambda d: d.get("created", 0))]

    async def delete_thread(self, thread_id: str) -> int:
        """Remove every attachment of the thread, files and descriptions; how many."""
        docs = await self.documents.find(ATTACHMENT, owner=thread_id, limit=100_000)
        for doc in docs:
            await self.documents.delete(ATTACHMENT, doc["id"])
        await asyncio.to_thread(shutil.rmtree, self._folder(thread_id), True)
        return len(docs)

    def _folder(self, thread_id: str) -> Path:
        # Thread ids match THREAD_ID_PATTERN (no "/", never "." or ".."): safe as a name.
        return self.options.directory / thread_id

    async def _describe(
        self,
        thread_id: str,
        aid: str,
        target: Path,
        name: str,
        media_type: str,
        size: int,
        caption: str,
        kind: str,
        run_id: str = "",
    ) -> Attachment:
        doc = {
            "id": aid,
            "thread_id": thread_id,
            "kind": kind,
            "ref": str(target.relative_to(self.options.directory)),
            "name": Path(name).name[:200] or aid,
            "media_type": media_type,
            "size": size,
            "caption": caption[:500],
            "created": time.time(),
            "run_id": run_id,
        }
        await self.documents.put(ATTACHMENT, aid, doc, owner=thread_id)
        return _public(doc)


def _public(doc: dict[str, Any]) -> Attachment:
    keys = ("id", "kind", "ref", "name", "media_type", "size", "caption", "created")
    return cast(Attachment, {k: doc[k] for k in keys if k in doc})


def _size(count: int) -> str:
    """A size as a person reads it: ``10 MB (10,485,760 bytes)``; bytes alone below 1 KB."""
    for unit, scale in (("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if count >= scale:
            return f"{count / scale:.3g} {unit} ({count:,} bytes)"
    return f"{count:,} bytes"
