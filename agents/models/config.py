"""Model profiles: parsed, normalised and validated before anything calls a model."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import structlog
import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from agents import yamlsafe
from agents.errors import ConfigError

log = structlog.get_logger(__name__)
DEFAULT_PROFILE = "default"
_PROFILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


NodeRole = Literal["router", "planner", "aggregator", "expert", "assistant", "summarizer"]
"""The built-in nodes that call a model: the router's tie-break, the planner, the aggregator,
the experts (one skill, joint or per task), the general assistant and the summarizer of long
threads."""
# The setting that names a node's profile, where it is not SKILLDESK_<NODE>_PROFILE.
_NODE_SETTING = {"summarizer": "SKILLDESK_SUMMARY_MODEL"}

ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh"]


class Price(BaseModel):
    """What a model's tokens cost, in US dollars per million tokens."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input: float = Field(ge=0, description="USD per million input (prompt) tokens.")
    output: float = Field(ge=0, description="USD per million output tokens (reasoning included).")


class ModelProfile(BaseModel):
    """One named model: where it lives, how to authenticate, how patient to be."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    provider: Literal["litellm", "langchain"] = Field(
        "litellm",
        description="'litellm': model strings as litellm writes them (OpenAI-compatible ones"
        " are called directly). 'langchain': a LangChain chat model, as init_chat_model"
        " writes it ('openai:gpt-5-mini', 'azure_openai:my-deployment').",
    )
    model: str = Field(
        description="Model as litellm writes it, 'provider/model' (e.g. 'openai/gpt-4o-mini',"
        " 'deepseek/deepseek-chat'). With api_base and no provider, 'openai/' is assumed."
        " For provider 'langchain', 'provider:model' as init_chat_model writes it."
    )
    kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="Keyword arguments of the LangChain chat model (provider 'langchain'"
        " only): use_responses_api, organization, default_headers, azure_endpoint,"
        " api_version, reasoning...",
    )
    reasoning_effort: ReasoningEffort | None = Field(
        None,
        description="How hard a reasoning model thinks (OpenAI's reasoning_effort; litellm"
        " translates it for other providers).",
    )
    price: Price | None = Field(
        None,
        description="Prices per million tokens, for models litellm's price map does not know"
        " (local and private ones); overrides the map.",
    )
    api_base: str | None = Field(None, description="Base URL of the provider's API.")
    api_key_env: str | None = Field(
        None, description="Name of the environment variable that holds the API key."
    )
    api_key: SecretStr | None = Field(
        None, description="The key itself; only set from SKILLDESK_MODEL_API_KEY.", exclude=True
    )
    temperature: float | None = Field(None, ge=0, le=2, description="Sampling temperature.")
    max_tokens: int | None = Field(None, gt=0, description="Cap on tokens per reply.")
    timeout_s: float = Field(
        60.0,
        gt=0,
        description="Seconds to wait for one attempt (a streamed one: for its first chunk, "
        "and for each next one).",
    )
    stream_limit_s: float = Field(
        600.0,
        gt=0,
        description="Seconds a streamed reply may go on in all: one that never ends is cut there.",
    )
    max_connections: int = Field(
        1000,
        ge=1,
        description="Calls open at once to this profile's server (the default is the OpenAI "
        "SDK's and litellm's); more wait for a free one, a wait that timeout_s does not count.",
    )
    retries: int = Field(2, ge=0, le=10, description="Retries of this profile before fallbacks.")
    fallbacks: tuple[str, ...] = Field((), description="Profiles tried, in order, when this fails.")

    @field_validator("model")
    @classmethod
    def _strip_model(cls, value: str) -> str:
        value = value.strip()
        if not value:
            raise ValueError("is empty; write it as 'provider/model', e.g. 'openai/gpt-4o-mini'")
        return value

    @field_validator("api_base")
    @classmethod
    def _normalise_base(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        value = value.strip().rstrip("/")
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(
                f"{value!r} is not an http(s) URL; write it like 'https://api.example.com/v1'"
            )
        return value

    @field_validator("api_key_env")
    @classmethod
    def _check_env_name(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = value.strip()
        if not _ENV_NAME.match(value):
            raise ValueError(f"{value!r} is not an environment variable name")
        return value

    @field_validator("api_key")
    @classmethod
    def _normalise_key(cls, value: SecretStr | None) -> SecretStr | None:
        return _clean_key(value.get_secret_value()) if value is not None else None

    @model_validator(mode="after")
    def _check_provider(self) -> ModelProfile:
        if self.kwargs and self.provider != "langchain":
            raise ValueError(
                "kwargs are the keyword arguments of a LangChain chat model; "
                "set provider: langchain, or remove kwargs"
            )
        if self.provider == "langchain" and "/" in self.model and ":" not in self.model:
            raise ValueError(
                f"model {self.model!r} is written as litellm writes it; a langchain profile"
                " names its model as init_chat_model does, e.g. 'openai:gpt-5-mini'"
            )
        return self

    @property
    def litellm_model(self) -> str:
        """The model string handed to litellm (OpenAI-compatible when only a base URL is set)."""
        if "/" not in self.model and self.api_base:
            return f"openai/{self.model}"
        return self.model


class ModelsConfig(BaseModel):
    """Every profile plus the name of the default one."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    default: str = Field(DEFAULT_PROFILE, description="The profile used when none is named.")
    profiles: dict[str, ModelProfile] = Field(description="Profiles by name.")
    nodes: dict[NodeRole, str] = Field(
        default_factory=dict, description="The profile of each built-in node that names one."
    )

    def for_node(self, node: NodeRole, run_profile: str | None = None) -> str:
        """The profile a node calls: the run's when it names one, else the node's own,
        else the default."""
        return run_profile or self.nodes.get(node) or self.default

    def get(self, name: str | None) -> ModelProfile:
        """Return a profile by name (the default when ``None``)."""
        key = name or self.default
        try:
            return self.profiles[key]
        except KeyError:
            known = ", ".join(sorted(self.profiles)) or "none"
            raise ConfigError(
                f"unknown model profile {key!r} (known profiles: {known})",
                fix="name one of the known profiles, or add it to the models file",
            ) from None


def _clean_key(raw: str) -> SecretStr | None:
    key = raw.strip()
    if not key:
        return None
    if any(ch.isspace() for ch in key):
        raise ValueError("contains whitespace inside the key; paste the key again on one line")
    return SecretStr(key)


def load_models_config(
    *,
    model: str | None = None,
    api_base: str | None = None,
    api_key: str | None = None,
    models_file: Path | None = None,
    environ: Mapping[str, str] | None = None,
    nodes: Mapping[NodeRole, str | None] | None = None,
) -> ModelsConfig | None:
    """Build the model profiles from the default-profile settings and an optional models file.

    Returns ``None`` when no model is configured at all (no-model mode). ``nodes`` names
    the profile of built-in nodes (``SKILLDESK_<NODE>_PROFILE``).

    Raises:
        ConfigError: naming the profile and the setting when anything is wrong.
    """
    env = os.environ if environ is None else environ
    raw_profiles: dict[str, dict[str, Any]] = {}
    default = DEFAULT_PROFILE
    if models_file is not None:
        data = _read_models_file(models_file)
        default = str(data.get("default", DEFAULT_PROFILE))
        raw_profiles.update(data.get("profiles") or {})
    if model and model.strip():
        if models_file is not None:  # both given: say what the setting changed
            log.warning(
                "models.setting_sets_a_profile",
                setting="SKILLDESK_MODEL",
                profile=DEFAULT_PROFILE,
                replaces_the_files=DEFAULT_PROFILE in raw_profiles,
                default_profile=default,
                note=f"SKILLDESK_MODEL sets the profile named {DEFAULT_PROFILE!r}"
                + (
                    ""
                    if default == DEFAULT_PROFILE
                    else f"; the models file makes {default!r} the default profile, so "
                    "it answers unless a request names another"
                ),
            )
        raw_profiles[DEFAULT_PROFILE] = {
            **raw_profiles.get(DEFAULT_PROFILE, {}),
            "model": model,
            "api_base": api_base,
            "api_key": api_key,
        }
    if not raw_profiles:
        return None

    profiles = {name: _parse_profile(name, raw, models_file) for name, raw in raw_profiles.items()}
    chosen = {node: name.strip() for node, name in (nodes or {}).items() if name and name.strip()}
    config = ModelsConfig(default=default, profiles=profiles, nodes=chosen)
    _check_references(config, models_file)
    for name, profile in profiles.items():
        if profile.api_key_env and not env.get(profile.api_key_env, "").strip():
            raise ConfigError(
                f"model profile {name!r}: environment variable {profile.api_key_env} "
                "(api_key_env) is not set",
                fix=f"export {profile.api_key_env}=<your key>, or remove api_key_env "
                "for a provider that needs no key",
            )
    return config


def resolve_api_key(profile: ModelProfile, environ: Mapping[str, str] | None = None) -> str | None:
    """The key for a profile: its own, else the one in its environment variable."""
    if profile.api_key is not None:
        return profile.api_key.get_secret_value()
    if profile.api_key_env:
        env = os.environ if environ is None else environ
        secret = _clean_key(env.get(profile.api_key_env, ""))
        return secret.get_secret_value() if secret else None
    return None


def _read_models_file(path: Path) -> dict[str, Any]:
    try:
        data = yamlsafe.load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(
            f"models file {path} (SKILLDESK_MODELS_FILE) does not exist",
            fix="create it or unset SKILLDESK_MODELS_FILE",
        ) from None
    except yamlsafe.YamlRefused as exc:
        raise ConfigError(f"models file {path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"models file {path} is not valid YAML: {yamlsafe.reason(exc)}") from None
    if not isinstance(data, dict) or not isinstance(data.get("profiles", {}), dict):
        raise ConfigError(
            f"models file {path} must be a mapping with a 'profiles' mapping",
            fix="see README, section 'Model profiles', for the shape",
        )
    return data


def _parse_profile(name: str, raw: Any, source: Path | None) -> ModelProfile:
    where = f" in {source}" if source else ""
    if not _PROFILE_NAME.match(str(name)):
        raise ConfigError(f"model profile name {name!r}{where} is not a valid name")
    if not isinstance(raw, dict):
        raise ConfigError(f"model profile {name!r}{where} must be a mapping")
    try:
        return ModelProfile.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{_setting_name(name, err['loc'])}: {yamlsafe.validation_message(err)}"
            if err["loc"]
            else yamlsafe.validation_message(err)
            for err in exc.errors()
        )
        raise ConfigError(f"model profile {name!r}{where}: {problems}") from None


def _setting_name(profile: str, loc: tuple[int | str, ...]) -> str:
    field = ".".join(str(part) for part in loc)
    if profile == DEFAULT_PROFILE and field in ("model", "api_base", "api_key"):
        return f"SKILLDESK_{'MODEL' if field == 'model' else 'MODEL_' + field.upper()}"
    return field


def _check_references(config: ModelsConfig, source: Path | None) -> None:
    where = f" (in {source})" if source else ""
    if config.default not in config.profiles:
        raise ConfigError(
            f"default model profile {config.default!r}{where} is not defined",
            fix=f"define it under 'profiles', or set default to one of {sorted(config.profiles)}",
        )
    for node, name in config.nodes.items():
        if name not in config.profiles:
            setting = _NODE_SETTING.get(node, f"SKILLDESK_{node.upper()}_PROFILE")
            raise ConfigError(
                f"{setting} names model profile {name!r}, which is not"
                f" defined (known profiles: {', '.join(sorted(config.profiles))})",
                fix="name one of the known profiles, or add it to the models file",
            )
    for name, profile in config.profiles.items():
        for fallback in profile.fallbacks:
            if fallback == name:
                raise ConfigError(f"model profile {name!r}{where} lists itself as a fallback")
            if fallback not in config.profiles:
                raise ConfigError(
                    f"model profile {name!r}{where}: fallback {fallback!r} is not a profile",
                    fix=f"define profile {fallback!r} or remove it from fallbacks",
                )
