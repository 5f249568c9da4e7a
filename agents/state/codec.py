"""A checkpoint saver's codec that neither encodes nor decodes a thread's whole history at
each step: mixed into the SQLite and the PostgreSQL savers."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from langchain_core.messages import BaseMessage
from langgraph.checkpoint.serde.base import SerializerProtocol


class KeptCodec:
    """Mixed into a checkpoint saver (before it): a history is written from its messages'
    kept encodings, and a large blob read again gives the value it gave (same bytes, same
    value), so a turn neither encodes nor decodes a thread's whole history at each step.
    Values read are shared between the reads that get them: channel values are replaced,
    never changed in place (LangGraph's reducers and this project's make new ones)."""

    kept_messages = 16384  # messages' encodings kept
    kept_blobs = 512  # decoded blobs kept
    serde: SerializerProtocol  # the saver's

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._codec_lock = threading.Lock()
        # Messages' msgpack encodings, by the message object (never changed once made).
        self._encoded: OrderedDict[int, tuple[BaseMessage, bytes]] = OrderedDict()
        self._blobs: OrderedDict[tuple[str, bytes], Any] = OrderedDict()

    def _dumps(self, value: Any) -> tuple[str, bytes]:
        """``serde.dumps_typed(value)``; a list of messages from the messages encoded before
        (a msgpack array is its items' encodings one after the other): a turn encodes its
        new messages, not the whole history again at each step."""
        if not isinstance(value, list) or len(value) < 8:
            return self.serde.dumps_typed(value)
        parts: list[bytes] = []
        with self._codec_lock:
            for item in value:
                known = self._encoded.get(id(item))
                if known is not None:  # kept alive in here: the id is still this object's
                    self._encoded.move_to_end(id(item))
                    parts.append(known[1])
                    continue
                if not isinstance(item, BaseMessage):
                    return self.serde.dumps_typed(value)
                kind, blob = self.serde.dumps_typed(item)
                if kind != "msgpack":
                    return self.serde.dumps_typed(value)
                self._encoded[id(item)] = (item, blob)
                parts.append(blob)
            while len(self._encoded) > self.kept_messages:
                self._encoded.popitem(last=False)
        blob = _msgpack_array(len(parts)) + b"".join(parts)
        if len(blob) >= _KEPT_BLOB_BYTES:  # the next read of these bytes: this value
            self._keep_blob(("msgpack", blob), value)
        return "msgpack", blob

    def _loads(self, kind: str, blob: bytes) -> Any:
        """``serde.loads_typed((kind, blob))``, a large blob's value kept by its bytes."""
        if len(blob) < _KEPT_BLOB_BYTES:
            return self.serde.loads_typed((kind, blob))
        key = (kind, blob)
        with self._codec_lock:
            if key in self._blobs:
                self._blobs.move_to_end(key)
                return self._blobs[key]
        value = self.serde.loads_typed((kind, blob))
        self._keep_blob(key, value)
        return value

    def delete_thread(self, thread_id: str) -> None:
        self._forget_kept_values()
        super().delete_thread(thread_id)  # type: ignore[misc]

    async def adelete_thread(self, thread_id: str) -> None:
        self._forget_kept_values()
        await super().adelete_thread(thread_id)  # type: ignore[misc]

    def _forget_kept_values(self) -> None:
        """Drop every message and value kept (a thread is deleted: none of its messages is
        to stay in the process; which entries are its is not kept, and deletes are rare)."""
        with self._codec_lock:
            self._encoded.clear()
            self._blobs.clear()

    def _keep_blob(self, key: tuple[str, bytes], value: Any) -> None:
        with self._codec_lock:
            self._blobs[key] = value
            while len(self._blobs) > self.kept_blobs:
                self._blobs.popitem(last=False)


_KEPT_BLOB_BYTES = 2048  # smaller blobs decode faster than they are looked up


def _msgpack_array(length: int) -> bytes:
    """The header of a msgpack array of ``length`` items."""
    if length < 16:
        return bytes([0x90 | length])
    if length < 1 << 16:
        return b"\xdc" + length.to_bytes(2, "big")
    return b"\xdd" + length.to_bytes(4, "big")
