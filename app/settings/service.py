"""Where the service runs and keeps its state: its address and folders, the checkpoint store,
Redis for several processes, HTTP and shutdown timings, logging."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, SecretStr, field_validator

from agents.content import content_dir, installed
from agents.state.checkpointers import sqlite_url

ROOT = Path(__file__).resolve().parent.parent.parent  # the repository, in a checkout


def _default_data_dir() -> Path:
    # An installed package's folder is no place for a database (read-only, or replaced by the
    # next install): there the data goes where the service runs, as ./data.
    return Path.cwd() / "data" if installed() else ROOT / "data"


class ServiceSettings(BaseModel):
    """The service's place, stores, timings and logs (a part of ``Settings``)."""

    config_file: Path | None = Field(
        None,
        description="A YAML file with any of these settings (arguments and environment win).",
    )
    host: str = Field("127.0.0.1", description="Address the HTTP server binds.")
    port: int = Field(8000, ge=1, le=65535, description="Port the HTTP server binds.")
    data_dir: Path = Field(
        default_factory=_default_data_dir,
        description="Holds the SQLite file and caches: data/ in a checkout, ./data (where the "
        "service runs) when installed.",
    )
    skills_dir: Path = Field(content_dir("skills"), description="Folder of skill folders.")
    workflows_dir: Path = Field(
        content_dir("workflows"), description="Folder of workflow YAML files."
    )
    prompts_dir: Path = Field(content_dir("prompts"), description="Folder of prompt templates.")
    checkpoint_url: str | None = Field(
        None,
        description="Where thread state is kept: sqlite:///file or postgresql://...; "
        "default: an SQLite file in data_dir.",
    )
    max_request_bytes: int = Field(
        16 * 1024 * 1024,
        ge=1024,
        description="Largest request body accepted (413 beyond; images travel base64).",
    )
    redis_url: str | None = Field(
        None,
        description="Redis (redis://host:6379/0) for several processes: run events and "
        "status readable from every process, cancels and reloads that reach every process, "
        "rate limits shared by all.",
    )
    redis_prefix: str = Field(
        "skilldesk",
        min_length=1,
        max_length=64,
        description="Starts every Redis key and channel (services sharing one Redis).",
    )
    metrics_token: SecretStr | None = Field(
        None,
        description="When set, GET /metrics asks for it as `Authorization: Bearer <token>` "
        "(Prometheus: `authorization: {credentials: ...}`); unset, /metrics is open, as on a "
        "private network behind the load balancer.",
    )
    keep_alive_s: float = Field(
        75,
        gt=0,
        le=3600,
        description="How long an idle HTTP connection is kept open. Longer than a client's or a "
        "load balancer's own idle timeout (httpx 5 s, nginx 60 s), so the service never closes a "
        "connection just as a request is sent on it.",
    )
    shutdown_grace_s: float = Field(
        20,
        ge=0,
        le=3600,
        description="On SIGTERM: how long runs under way may go on to finish before they are "
        "stopped and left to be resumed (by another process, or this one's next start).",
    )
    run_events_retain_s: float = Field(
        600,
        ge=0,
        description="How long a run's events stay joinable (GET .../runs/{id}/stream) after "
        "it ends.",
    )
    sse_keepalive_s: float = Field(
        15, gt=0, le=300, description="A comment on an idle event stream this often."
    )
    run_lease_s: float = Field(
        30,
        ge=1,
        le=3600,
        description="Several processes on PostgreSQL: a run holds its thread with a lease it "
        "renews; a process that dies loses its runs after this many seconds, and every process "
        "looks this often for such runs to resume.",
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field("info")
    log_format: Literal["auto", "json", "console"] = Field(
        "auto", description="auto: readable on a terminal, JSON lines otherwise."
    )

    @field_validator("log_level", "log_format", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("checkpoint_url", "redis_url", mode="before")
    @classmethod
    def _blank_is_default(cls, value: Any) -> Any:
        return (value.strip() or None) if isinstance(value, str) else value

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(
                "not a Redis URL; use redis://host:6379/0 (rediss:// for TLS, "
                "unix:///path/to/redis.sock for a socket), or leave it unset for one process"
            )
        db = urlsplit(value).path.strip("/") if not value.startswith("unix://") else ""
        if db and not db.isdigit():
            raise ValueError(
                f"the database {db!r} is not a number; use redis://host:6379/0 (0 to 15 "
                "on a default Redis)"
            )
        return value

    @field_validator("checkpoint_url")
    @classmethod
    def _known_store(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(
            ("sqlite://", "postgresql://", "postgres://")
        ):
            raise ValueError(
                "unknown scheme; use sqlite:///path/to/file.sqlite or "
                "postgresql://user@host:5432/db"
            )
        return value

    @property
    def resolved_checkpoint_url(self) -> str:
        """The checkpoint URL, defaulting to ``<data_dir>/skilldesk.sqlite``."""
        return self.checkpoint_url or sqlite_url(self.data_dir.resolve() / "skilldesk.sqlite")
