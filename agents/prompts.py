"""Every text the model reads lives as a file in ``prompts/``, rendered in a Jinja2 sandbox.

- ``<name>.md``: prompt templates (router, planner, expert, aggregator, assistant) and the
  text ``load_skill`` returns (``skill_definition.md``).
- ``tools/<name>.yaml``: function-calling tools the service defines itself (the meta-tools,
  the router's tie-break, the planner): name, description and JSON-Schema parameters.
- ``replies.yaml``: replies the service writes into a conversation itself.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import yaml
from jinja2 import (
    FileSystemLoader,
    StrictUndefined,
    Template,
    TemplateError,
    TemplateNotFound,
    UndefinedError,
)
from jinja2.sandbox import SandboxedEnvironment

from agents import yamlsafe
from agents.content import content_dir
from agents.errors import ConfigError

DEFAULT_PROMPTS_DIR = content_dir("prompts")
_FIX = "restore it from the repository or point SKILLDESK_PROMPTS_DIR elsewhere"


class Prompts:
    """Loads the templates of a folder and renders them with the given values."""

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
        self._tools: dict[tuple[str, str], dict[str, Any]] = {}
        self._replies: dict[str, Template] | None = None

    def render(self, name: str, /, **values: Any) -> str:
        """Render template ``name`` (``<name>.md``, without the suffix).

        Raises:
            ConfigError: when the template is missing or names a value that was not passed.
        """
        return self._render_file(f"{name}.md", values).strip()

    def tool(self, name: str, /, **values: Any) -> dict[str, Any]:
        """The tool ``tools/<name>.yaml`` rendered with ``values``: a dict with its
        ``name``, ``description`` and ``parameters`` (JSON Schema). A fresh copy each time.

        Raises:
            ConfigError: when the file is missing, is not YAML, or lacks one of the three keys.
        """
        key = (name, json.dumps(values, sort_keys=True, default=str))
        tool = self._tools.get(key)
        if tool is None:
            path = f"tools/{name}.yaml"
            try:
                tool = yaml.safe_load(self._render_file(path, values))
            except yaml.YAMLError as exc:
                raise ConfigError(
                    f"prompt file {path} is not valid YAML: {yamlsafe.reason(exc)}"
                ) from None
            missing = [k for k in ("name", "description", "parameters") if not _has(tool, k)]
            if missing:
                raise ConfigError(
                    f"prompt file {path} lacks {', '.join(missing)}",
                    fix="give the tool a name, a description and JSON-Schema parameters",
                )
            if len(self._tools) > 256:  # tools rendered with per-call values (enums)
                self._tools.clear()
            self._tools[key] = tool
        return copy.deepcopy(tool)

    def reply(self, name: str, /, **values: Any) -> str:
        """The service's own reply ``name`` from ``replies.yaml``, rendered with ``values``.

        Raises:
            ConfigError: when the reply is missing or names a value that was not passed.
        """
        template = self._load_replies().get(name)
        if template is None:
            raise ConfigError(f"prompt file replies.yaml has no reply {name!r}", fix=_FIX)
        try:
            return template.render(**values).strip()
        except UndefinedError as exc:
            raise ConfigError(f"reply {name!r} in replies.yaml: {exc.message}") from None

    def _render_file(self, path: str, values: dict[str, Any]) -> str:
        try:
            return self._env.get_template(path).render(**values)
        except TemplateNotFound:
            raise ConfigError(
                f"prompt template {path} is missing from {self.directory}", fix=_FIX
            ) from None
        except UndefinedError as exc:
            raise ConfigError(f"prompt template {path}: {exc.message}") from None

    def _load_replies(self) -> dict[str, Template]:
        if self._replies is None:
            path = self.directory / "replies.yaml"
            try:
                raw = yaml.safe_load(path.read_text(encoding="utf-8"))
            except (OSError, yaml.YAMLError) as exc:
                raise ConfigError(f"prompt file {path} cannot be read: {exc}", fix=_FIX) from None
            if not isinstance(raw, dict):
                raise ConfigError(f"prompt file {path} must map reply names to templates")
            try:
                self._replies = {str(k): self._env.from_string(str(v)) for k, v in raw.items()}
            except TemplateError as exc:
                raise ConfigError(f"prompt file {path}: {exc}") from None
        return self._replies


def _has(tool: Any, key: str) -> bool:
    return isinstance(tool, dict) and bool(tool.get(key))
