"""One settings model for the whole service: arguments, environment (SKILLDESK_*), YAML file."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from agents.content import content_dir, installed
from agents.errors import ConfigError
from agents.memory.summaries import SummaryOptions
from agents.models import ModelsConfig, load_models_config
from agents.router.learned import LearnOptions
from agents.skills.embeddings import Precision
from agents.skills.service import SkillsOptions
from agents.state.attachments import DEFAULT_TYPES, AttachmentOptions
from agents.state.checkpointers import sqlite_url
from agents.threads import RetentionOptions

ROOT = Path(__file__).resolve().parent.parent  # the repository, in a checkout
ENV_PREFIX = "SKILLDESK_"
# The bundled skills that run in the service's process (read-only lookups on most turns;
# each skill.yaml says why): trusted by default, as no skill dropped in is.
BUNDLED_IN_PROCESS = (
    "device-alarms",
    "inventory",
    "maintenance-kb",
    "order-query",
    "sensor-readings",
)
_ON_OFF = {"true": "on", "yes": "on", "1": "on", "false": "off", "no": "off", "0": "off"}


def _default_data_dir() -> Path:
    # An installed package's folder is no place for a database (read-only, or replaced by the
    # next install): there the data goes where the service runs, as ./data.
    return Path.cwd() / "data" if installed() else ROOT / "data"


class Settings(BaseSettings):
    """Every setting of the service. Each is also ``SKILLDESK_<NAME>`` in the environment.

    Values come from the arguments, then the environment, then the YAML file named by
    ``config_file`` (argument or ``SKILLDESK_CONFIG_FILE``).

    Raises:
        ConfigError: the YAML file named does not exist.
    """

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", frozen=True)

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
    model: str | None = Field(
        None, description="Default model as 'provider/model' (e.g. 'openai/gpt-4o-mini')."
    )
    model_api_base: str | None = Field(None, description="Base URL of the default model's API.")
    model_api_key: SecretStr | None = Field(None, description="API key of the default model.")
    models_file: Path | None = Field(None, description="YAML file with more model profiles.")
    skills_watch: bool = Field(True, description="Reload skills live when their folder changes.")
    skills_trusted: list[str] = Field(
        list(BUNDLED_IN_PROCESS),
        description="Skills whose handlers may run inside the service's process when their "
        "skill.yaml asks for isolation: thread (a JSON list); any other skill's handlers run "
        "in worker processes, whatever it asks. Default: the bundled lookup skills.",
    )
    skills_worker_cgroups: bool = Field(
        True,
        description="Each skill worker process in a cgroup (v2) of its own, where the service "
        "may make one (root, or a delegated cgroup): every process its handlers start ends "
        "with it, whatever they do. Off, or where it may not: stopped by its process tree.",
    )
    skills_embeddings: bool = Field(
        True, description="Dense (MiniLM) retrieval besides keywords; off: keywords only."
    )
    skills_embedding_precision: Precision = Field(
        "int8",
        description="MiniLM's linear layers in int8 (a query in about a third of the time, "
        "the same recall on the labelled set) or fp32 (the model's exact vectors).",
    )
    skills_embedding_model: Path | None = Field(
        None,
        description="A local sentence-transformers model folder for dense retrieval (a "
        "multilingual one, say); unset: the packaged MiniLM. Nothing is downloaded.",
    )
    max_request_bytes: int = Field(
        16 * 1024 * 1024,
        ge=1024,
        description="Largest request body accepted (413 beyond; images travel base64).",
    )
    skills_prompt_budget: int = Field(
        300, ge=50, le=4000, description="Tokens of skill index in each prompt."
    )
    route_confident: float = Field(
        0.45,
        ge=0,
        le=1,
        description="Retrieval score (with a margin) at which a skill answers without a model "
        "call to route (calibrated in bench/retrieval_quality.py: precision 0.99).",
    )
    route_ambiguous_floor: float = Field(
        0.25, ge=0, le=1, description="Below this score no skill is a candidate: general chat."
    )
    route_offer_tokens: int = Field(
        2000,
        ge=0,
        le=100_000,
        description=(
            "When retrieval is not confident, up to three close candidates whose definitions "
            "fit in this many tokens go to one expert, which uses the one that fits (no "
            "separate routing call); the general assistant gets its best hits' definitions "
            "within the same budget. 0: a routing call picks among candidates, nothing is "
            "pre-loaded."
        ),
    )
    skills_write_examples: bool = Field(
        True,
        description=(
            "The configured model (the router's profile) writes example messages for each "
            "skill that has none, once per skill version, in the background after a (re)load; "
            "cached by content hash beside the embeddings. Needs a model and dense retrieval; "
            "false: no such call is made."
        ),
    )
    learn_examples: bool = Field(
        True,
        description=(
            "Routing learns from use: a user's message whose skill the model chose (among "
            "candidates, in a tie-break, or with load_skill) in a turn that succeeded is stored "
            "as an example of that skill (users' words, kept in the checkpoint database) and "
            "routes the next such message with no model choosing. false: nothing is stored."
        ),
    )
    learn_examples_per_skill: int = Field(
        50, ge=1, le=10_000, description="Learned examples kept per skill (oldest unconfirmed go)."
    )
    route_learned: float = Field(
        0.8,
        ge=0,
        le=1,
        description="Cosine to an example learned from use at which a message routes to its "
        "skill with no model call.",
    )
    max_tool_rounds: int = Field(5, ge=1, le=50, description="Tool-calling rounds per expert.")
    joint_expert_tokens: int = Field(
        4000,
        ge=0,
        le=100_000,
        description=(
            "Several independent requests whose skills' definitions (instructions and tool "
            "schemas) fit in this many tokens are answered by one expert holding them all; "
            "0 runs an expert per request and an aggregator."
        ),
    )
    router_profile: str | None = Field(
        None, description="Model profile of the router's tie-break (default: the default)."
    )
    planner_profile: str | None = Field(
        None, description="Model profile of the planner of multi-request messages."
    )
    aggregator_profile: str | None = Field(
        None, description="Model profile of the aggregator of parallel experts' results."
    )
    expert_profile: str | None = Field(
        None, description="Model profile of the experts (one skill, joint, or per task)."
    )
    assistant_profile: str | None = Field(
        None, description="Model profile of the general assistant (no skill matched)."
    )
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
    summary_model: str | None = Field(
        None, description="Model profile that writes summaries (default: the default)."
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
    mcp_list_skill_tools: Literal["auto", "on", "off"] = Field(
        "auto",
        description="Whether the tool server lists every skill tool beside the meta-tools "
        "(MCP tools/list): auto lists them while there are fewer than 50, so that a large "
        "catalogue is reached through search_skills.",
    )
    api_keys: SecretStr | None = Field(
        None,
        description="Bootstrap API keys: `user:scope,scope:token` entries separated by spaces "
        "or `;` (scopes: chat, tools, approve, admin). More with `skilldesk keys create`.",
    )
    api_keys_file: Path | None = Field(
        None,
        description="A YAML file of bootstrap keys: a list of {user, scopes, name, token or "
        "sha256}.",
    )
    auth_disabled: bool = Field(
        False,
        description="Serve without authentication on any address: every caller is an admin. "
        "Only on a trusted network; without keys a non-loopback bind refuses to start.",
    )
    obo_issuer: str | None = Field(None, description="On-behalf-of tokens: the `iss` trusted.")
    obo_audience: str | None = Field(
        None, description="On-behalf-of tokens: the `aud` they must name (this service)."
    )
    obo_secret: SecretStr | None = Field(
        None, description="On-behalf-of tokens: an HS256 shared secret (or a key file below)."
    )
    obo_public_key_file: Path | None = Field(
        None, description="On-behalf-of tokens: a PEM public key (RS256 or ES256)."
    )
    obo_jwks_file: Path | None = Field(
        None, description="On-behalf-of tokens: a JWKS file (RS256 or ES256 keys by `kid`)."
    )
    obo_leeway_s: float = Field(
        30, ge=0, le=600, description="Clock skew allowed on a token's exp, nbf and iat."
    )
    oauth_authorization_servers: list[str] = Field(
        [],
        description="Authorization servers named in /.well-known/oauth-protected-resource "
        "(RFC 9728), for MCP clients.",
    )
    public_url: str | None = Field(
        None,
        description="The service's public base URL (https://host), for the resource metadata; "
        "default: the URL a request came to.",
    )
    rate_limit_per_minute: int = Field(
        600, ge=0, description="Requests per minute per API key (0: no limit); 429 beyond."
    )
    rate_limit_tokens_per_minute: int = Field(
        0,
        ge=0,
        description="Model tokens per minute per API key, counted as runs end (0: no "
        "limit); past it, requests are refused (429) until the next minute.",
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
    daily_spend_limit_usd: float = Field(
        0,
        ge=0,
        description="What one user may spend on model calls per UTC day, in US dollars; past "
        "it new runs are refused (429 `spending_limit_reached`) until midnight UTC (0: none). "
        "Counts calls whose price is known.",
    )

    @property
    def daily_spend_limit_micro_usd(self) -> int:
        """``daily_spend_limit_usd`` in millionths of a dollar (0: none)."""
        return round(self.daily_spend_limit_usd * 1_000_000)

    max_model_calls: int = Field(12, ge=1, le=200, description="Model calls per run, in all.")
    max_tool_calls: int = Field(24, ge=1, le=500, description="Tool calls per run, in all.")
    log_level: Literal["debug", "info", "warning", "error"] = Field("info")
    log_format: Literal["auto", "json", "console"] = Field(
        "auto", description="auto: readable on a terminal, JSON lines otherwise."
    )

    @field_validator("log_level", "log_format", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("mcp_list_skill_tools", mode="before")
    @classmethod
    def _on_off(cls, value: Any) -> Any:
        if isinstance(value, bool):
            return "on" if value else "off"
        if isinstance(value, str):
            word = value.strip().lower()
            return _ON_OFF.get(word, word)
        return value

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

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        config_file = _config_file(init_settings())
        if config_file is not None:
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=config_file))
        return tuple(sources)

    @property
    def resolved_checkpoint_url(self) -> str:
        """The checkpoint URL, defaulting to ``<data_dir>/skilldesk.sqlite``."""
        return self.checkpoint_url or sqlite_url(self.data_dir.resolve() / "skilldesk.sqlite")

    def skills_options(self) -> SkillsOptions:
        """How the skills folder is served."""
        return SkillsOptions(
            directory=self.skills_dir,
            data_dir=self.data_dir,
            embeddings=self.skills_embeddings,
            embedding_precision=self.skills_embedding_precision,
            embedding_model=self.skills_embedding_model,
            trusted=frozenset(self.skills_trusted),
            worker_cgroups=self.skills_worker_cgroups,
        )

    def learn_options(self) -> LearnOptions:
        """Whether and how much routing learns from use."""
        return LearnOptions(enabled=self.learn_examples, per_skill=self.learn_examples_per_skill)

    def mcp_skill_tools_listed(self) -> bool | None:
        """Whether the tool server lists every skill tool; ``None``: decided by their number."""
        return {"on": True, "off": False}.get(self.mcp_list_skill_tools)

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

    def attachment_options(self) -> AttachmentOptions:
        """Where attachments are kept (under the data folder) and what is accepted."""
        return AttachmentOptions(
            directory=self.data_dir / "attachments",
            max_bytes=self.attachment_max_bytes,
            media_types=tuple(self.attachment_types),
        )

    def models(self) -> ModelsConfig | None:
        """The validated model profiles (``None`` when no model is configured)."""
        key = self.model_api_key.get_secret_value() if self.model_api_key else None
        return load_models_config(
            model=self.model,
            api_base=self.model_api_base,
            api_key=key,
            models_file=self.models_file,
            nodes={
                "router": self.router_profile,
                "planner": self.planner_profile,
                "aggregator": self.aggregator_profile,
                "expert": self.expert_profile,
                "assistant": self.assistant_profile,
                "summarizer": self.summary_model,
            },
        )


def _config_file(init_values: dict[str, Any]) -> Path | None:
    """The YAML file to read: the ``config_file`` argument, else ``SKILLDESK_CONFIG_FILE``.

    Raises:
        ConfigError: naming the argument or the variable when the file does not exist.
    """
    if "config_file" in init_values:  # arguments win, as for every other setting
        value = init_values["config_file"]
        origin, fix = "config_file", "create the file or give another"
    else:
        value = os.environ.get(f"{ENV_PREFIX}CONFIG_FILE") or None
        origin, fix = f"{ENV_PREFIX}CONFIG_FILE", "create the file or unset the variable"
    if value is None:
        return None
    path = Path(value).expanduser()
    if not path.is_file():
        problem = "is not a file" if path.exists() else "does not exist"
        raise ConfigError(f"{origin}: {value} {problem}", fix=fix)
    return path


def load_settings(**overrides: Any) -> Settings:
    """Read settings from the environment (and the YAML config file), with overrides on top.

    ``None`` overrides are left out (an option not given on the command line).

    Raises:
        ConfigError: naming the setting (as its environment variable) and what is wrong.
    """
    try:
        return Settings(**{k: v for k, v in overrides.items() if v is not None})
    except ConfigError:
        raise
    except ValidationError as exc:
        problems = "; ".join(
            f"{ENV_PREFIX}{'_'.join(str(p) for p in err['loc']).upper()}: {err['msg']}"
            for err in exc.errors()
        )
        raise ConfigError(f"invalid settings: {problems}") from None
    except Exception as exc:  # YAML syntax errors and the like from the config file
        raise ConfigError(f"cannot read settings: {exc}") from None
