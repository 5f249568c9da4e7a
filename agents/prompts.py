"""Prompt templates live as files in ``prompts/``; they are rendered in a Jinja2 sandbox."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jinja2 import FileSystemLoader, StrictUndefined, TemplateNotFound, UndefinedError
from jinja2.sandbox import SandboxedEnvironment

from agents.errors import ConfigError

DEFAULT_PROMPTS_DIR = Path(__file__).resolve().parent.parent / "prompts"


class Prompts:
    """Loads ``<name>.md`` templates from a folder and renders them with the given values."""

    def __init__(self, directory: Path = DEFAULT_PROMPTS_DIR) -> None:
        self.directory = directory
        # StrictUndefined: a template naming a value nobody passes fails loudly.
        # trim_blocks/lstrip_blocks: a line holding only a {% tag %} leaves nothing behind.
        self._env = SandboxedEnvironment(
            loader=FileSystemLoader(str(directory)),
            autoescape=False,
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )

    def render(self, name: str, **values: Any) -> str:
        """Render template ``name`` (without ``.md``).

        Raises:
            ConfigError: when the template is missing or names a value that was not passed.
        """
        try:
            return self._env.get_template(f"{name}.md").render(**values).strip()
        except TemplateNotFound:
            raise ConfigError(
                f"prompt template {name}.md is missing from {self.directory}",
                fix="restore it from the repository or point SKILLDESK_PROMPTS_DIR elsewhere",
            ) from None
        except UndefinedError as exc:
            raise ConfigError(f"prompt template {name}.md: {exc.message}") from None
