"""What a thread keeps: when its messages are summarised, how much of its history is
retained, and which attachments it accepts."""

from __future__ import annotations

from pydantic import BaseModel, Field

from agents.memory.summaries import SummaryOptions
from agents.state.attachments import DEFAULT_TYPES
from agents.threads import RetentionOptions


class ThreadSettings(BaseModel):
    """Summaries, retention and attachments (a part of ``Settings``)."""

    summary_after_messages: int = Field(
        20,
        ge=0,
        le=10_000,
        description="Summarise a thread's earlier messages when its active history has more "
        "messages than this (0: no message threshold).",
    )
    summary_after_tokens: int = Field(
        8000,
        ge=0,
        le=10_000_000,
        description="... or when its estimated tokens (cl100k plus a margin) pass this "
        "(0: no token threshold).",
    )
    summary_keep: int = Field(
        6, ge=1, le=1000, description="Recent messages a summary always keeps verbatim."
    )
    summary_entries: int = Field(
        60,
        ge=0,
        le=100_000,
        description="Summarised messages whose entry (index, speaker, start) the summary "
        "keeps; older ones are counted by speaker, so a long thread's summary stays bounded.",
    )
    retention_keep_checkpoints: int = Field(
        100,
        ge=0,
        le=1_000_000,
        description="Newest checkpoints kept per thread; older ones are pruned (0: keep all). "
        "A fork or the history reaches back this far.",
    )
    retention_keep_summarised: int = Field(
        0,
        ge=0,
        le=100_000_000,
        description="Newest summarised messages whose originals are kept per thread, shown "
        "by GET /v1/threads/{id} (0: all; the summary stands for the rest).",
    )
    retention_idle_days: float = Field(
        0,
        ge=0,
        description="Delete threads (checkpoints, record, attachments) not updated for this "
        "many days (0: never).",
    )
    retention_interval_s: float = Field(
        3600,
        ge=0,
        description="How often the service applies retention in the background (0: only "
        "`skilldesk threads prune`).",
    )
    attachment_max_bytes: int = Field(
        10 * 1024 * 1024, ge=1, description="Largest file accepted as an attachment."
    )
    attachment_types: list[str] = Field(
        list(DEFAULT_TYPES), description="Media types accepted as attachments."
    )

    def summary_options(self) -> SummaryOptions:
        """When a thread's earlier messages are summarised."""
        return SummaryOptions(
            after_messages=self.summary_after_messages,
            after_tokens=self.summary_after_tokens,
            keep=self.summary_keep,
            entries=self.summary_entries,
        )

    def retention(self) -> RetentionOptions:
        """How much of each thread is kept."""
        return RetentionOptions(
            keep_checkpoints=self.retention_keep_checkpoints,
            keep_summarised=self.retention_keep_summarised,
            idle_days=self.retention_idle_days,
            interval_s=self.retention_interval_s,
        )
