"""A thread's latest checkpoint read once per run: the read a run makes before its graph
starts is handed to the graph's own first read instead of reading (and deserialising the
whole history) again."""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple


class ReadOnce:
    """Mixed into a checkpoint saver (before it, so these methods wrap the saver's).

    ``keep_next_read(thread_id)`` arms it: the next read of the thread's latest checkpoint
    is kept, and the read after it (LangGraph's, when the run's graph starts) gets that copy
    instead of a round trip to the store. Any write of the thread drops what is kept, as does
    ``forget``; a read of a given checkpoint id or namespace is never served from it. The run
    holds the thread meanwhile, so nothing else writes it between the two reads.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._armed: set[str] = set()
        self._kept: dict[str, CheckpointTuple] = {}

    def keep_next_read(self, thread_id: str) -> None:
        """Keep the next read of ``thread_id``'s latest checkpoint for the read after it."""
        self._armed.add(thread_id)
        self._kept.pop(thread_id, None)

    def forget(self, thread_id: str) -> None:
        """Drop what is kept of ``thread_id`` (its run started, or ended before it did)."""
        self._armed.discard(thread_id)
        self._kept.pop(thread_id, None)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        thread_id = _latest_of(config)
        if thread_id is not None and (kept := self._kept.pop(thread_id, None)) is not None:
            return kept
        found: CheckpointTuple | None = await super().aget_tuple(config)  # type: ignore[misc]
        if thread_id is not None and thread_id in self._armed:
            self._armed.discard(thread_id)
            if found is not None:
                self._kept[thread_id] = _copy(found)
        return found

    async def aput(self, config: RunnableConfig, *args: Any, **kwargs: Any) -> RunnableConfig:
        self._drop(config)
        return await super().aput(config, *args, **kwargs)  # type: ignore[misc,no-any-return]

    async def aput_writes(self, config: RunnableConfig, *args: Any, **kwargs: Any) -> None:
        self._drop(config)
        await super().aput_writes(config, *args, **kwargs)  # type: ignore[misc]

    async def adelete_thread(self, thread_id: str) -> None:
        self.forget(str(thread_id))
        await super().adelete_thread(thread_id)  # type: ignore[misc]

    def _drop(self, config: RunnableConfig) -> None:
        thread_id = config.get("configurable", {}).get("thread_id")
        if thread_id is not None:
            self._armed.discard(str(thread_id))
            self._kept.pop(str(thread_id), None)


def _latest_of(config: RunnableConfig) -> str | None:
    """The thread whose latest root checkpoint ``config`` reads, else None."""
    configurable = config.get("configurable", {})
    thread_id = configurable.get("thread_id")
    if thread_id is None or configurable.get("checkpoint_id") or configurable.get("checkpoint_ns"):
        return None
    return str(thread_id)


def _copy(found: CheckpointTuple) -> CheckpointTuple:
    """The tuple with its checkpoint's dicts copied: LangGraph changes a checkpoint's versions
    in place as its steps run (the values it replaces, never changes)."""
    checkpoint = found.checkpoint
    copied = {
        **checkpoint,
        "channel_values": dict(checkpoint["channel_values"]),
        "channel_versions": dict(checkpoint["channel_versions"]),
        "versions_seen": {k: dict(v) for k, v in checkpoint["versions_seen"].items()},
    }
    return found._replace(
        checkpoint=copied,  # type: ignore[arg-type]
        pending_writes=list(found.pending_writes) if found.pending_writes is not None else None,
    )
