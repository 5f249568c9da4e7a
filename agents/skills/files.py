"""Files a handler made (a result's ``files``: paths in its skill's ``data_dir``, or
``{"path", "caption"}``): adopted as attachments of the call's thread, or read and handed
with the result to a direct caller that has no thread to keep them. Either way the result
names each file instead of its path on the server, and a handler may hand out no file but
its skill's own."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from agents.skills.context import ToolContext
from agents.skills.results import MadeFile, ToolResult, result_of, tool_error
from agents.skills.spec import ResultLimits
from agents.skills.trimming import has_files
from agents.state.attachments import AttachmentStore, media_type_of

HANDED_MAX_BYTES = 16 * 2**20  # files a direct call returns with its result, in all


async def adopt_files(value: Any, context: ToolContext, attachments: AttachmentStore | None) -> Any:
    """``value`` with the files it names made attachments of the call's thread, and named by
    attachment id instead of by path. Without a thread (or a store) the paths stay, for
    ``hand_over`` (a direct caller) to replace.

    Raises:
        ValueError: a file outside the skill's data folder, or missing.
    """
    if not has_files(value) or attachments is None or not context.thread_id:
        return value
    adopted, specs = [], _file_specs(value["files"])
    for spec in specs:
        path = await asyncio.to_thread(_own_file, context.data_dir, spec.get("path"))
        attachment = await attachments.adopt(
            context.thread_id,
            path,
            key=context.idempotency_key,
            caption=str(spec.get("caption", "")),
            run_id=context.run_id or "",
        )
        adopted.append({k: attachment.get(k) for k in ("id", "name", "media_type", "size")})
    return {**_without_paths(value, specs), "files": adopted}


async def hand_over(result: ToolResult, data_dir: Path, limits: ResultLimits) -> ToolResult:
    """``result`` (ok, with ``files``) with those files read from ``data_dir`` into ``files``
    and named in its data, trimmed again to ``limits``. A file outside ``data_dir``, missing,
    or beyond ``HANDED_MAX_BYTES`` in all fails the call."""
    started = time.perf_counter() - result.ms / 1000
    specs = _file_specs(result.data["files"])
    try:
        read = await asyncio.to_thread(_read_files, data_dir, specs)
    except ValueError as exc:  # it ran (its side effects made): the files alone fail
        why = f"{result.tool} ran, but its files cannot be returned: {exc}"
        return tool_error(result.tool, "tool_failed", why, started)
    named = [{"name": f.name, "media_type": f.media_type, "size": len(f.data)} for f in read]
    for entry, file in zip(named, read, strict=True):
        if file.caption:
            entry["caption"] = file.caption
    value = {**_without_paths(result.data, specs), "files": named}
    trimmed = await asyncio.to_thread(result_of, result.tool, value, limits, started)
    return replace(trimmed, files=tuple(read) if trimmed.ok else ())


def _file_specs(files: Any) -> list[dict[str, Any]]:
    """A result's ``files`` as ``{"path", "caption"?}`` each (a path alone, or a list)."""
    return [
        f if isinstance(f, dict) else {"path": f}
        for f in (files if isinstance(files, list) else [files])
    ]


def _without_paths(value: dict[str, Any], specs: list[dict[str, Any]]) -> dict[str, Any]:
    """``value`` without the fields and items, at any depth, that only repeat a file's path:
    a server path means nothing to the model, the user or another agent."""
    paths = {str(spec.get("path")) for spec in specs}

    def kept(item: Any) -> Any:
        if isinstance(item, dict):
            return {k: kept(v) for k, v in item.items() if not _is_path(v, paths)}
        if isinstance(item, list):
            return [kept(v) for v in item if not _is_path(v, paths)]
        return item

    return {k: kept(v) for k, v in value.items() if k != "files" and not _is_path(v, paths)}


def _is_path(item: Any, paths: set[str]) -> bool:
    return isinstance(item, str) and item in paths


def _read_files(data_dir: Path, specs: list[dict[str, Any]]) -> list[MadeFile]:
    """The files ``specs`` name, read (each one of the skill's, see ``_own_file``).

    Raises:
        ValueError: a file not the skill's, or more than ``HANDED_MAX_BYTES`` in all.
    """
    paths = [_own_file(data_dir, spec.get("path")) for spec in specs]
    total = sum(path.stat().st_size for path in paths)
    if total > HANDED_MAX_BYTES:
        raise ValueError(
            f"the files it made come to {total:,} bytes, more than the "
            f"{HANDED_MAX_BYTES:,} a call returns with its result"
        )
    return [
        MadeFile(
            path.name, media_type_of(path.name), path.read_bytes(), str(spec.get("caption") or "")
        )
        for spec, path in zip(specs, paths, strict=True)
    ]


def _own_file(data_dir: Path, path: Any) -> Path:
    """``path`` resolved, if it is a file in ``data_dir`` (a handler may not hand out others).

    Raises:
        ValueError: naming the path.
    """
    resolved = Path(str(path or "")).resolve()
    if not resolved.is_relative_to(data_dir.resolve()) or not resolved.is_file():
        # Its name only: the server's folders are not the caller's to see.
        name = Path(str(path or "")).name
        raise ValueError(f"the file {name!r} is not a file in the skill's data folder")
    return resolved
