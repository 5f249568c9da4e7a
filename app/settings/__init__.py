"""One settings model for the whole service: arguments, environment (SKILLDESK_*), YAML file.

``Settings`` is the one class the service constructs; its fields are grouped by area, one
part per module: ``service.py`` (address, folders, stores, timings, logs), ``models.py``,
``skills.py``, ``routing.py`` (routing, learning, a run's limits), ``threads.py``
(summaries, retention, attachments), ``access.py`` (keys, tokens, rate and spending limits).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from agents.errors import ConfigError
from agents.skills.service import SkillsOptions
from agents.state.attachments import AttachmentOptions
from app.settings.access import AccessSettings
from app.settings.models import ModelSettings
from app.settings.routing import RoutingSettings
from app.settings.service import ROOT, ServiceSettings
from app.settings.skills import SkillSettings
from app.settings.threads import ThreadSettings

__all__ = ["ENV_PREFIX", "ROOT", "Settings", "load_settings"]

ENV_PREFIX = "SKILLDESK_"


# pydantic collects fields base-first: the parts are listed last to first, so the fields run
# service, models, skills, routing, threads, access.
class Settings(
    AccessSettings,
    ThreadSettings,
    RoutingSettings,
    SkillSettings,
    ModelSettings,
    ServiceSettings,
    BaseSettings,
):
    """Every setting of the service. Each is also ``SKILLDESK_<NAME>`` in the environment.

    Values come from the arguments, then the environment, then the YAML file named by
    ``config_file`` (argument or ``SKILLDESK_CONFIG_FILE``).

    Raises:
        ConfigError: the YAML file named does not exist.
    """

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", frozen=True)

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

    def attachment_options(self) -> AttachmentOptions:
        """Where attachments are kept (under the data folder) and what is accepted."""
        return AttachmentOptions(
            directory=self.data_dir / "attachments",
            max_bytes=self.attachment_max_bytes,
            media_types=tuple(self.attachment_types),
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
