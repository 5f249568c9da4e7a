"""Checkpoints written by an older state schema, brought up to the current one on read.

A migration only adds defaults and renames fields: it never fails and never leaves ``None``
where the current code expects a value. ``migrate`` gives the values a reader sees; a run
also writes ``changes`` with its input, so the thread's next checkpoint has the new shape.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agents.state.schema import SCHEMA_VERSION

# Fields every reader may take for granted, with their defaults (a list or dict is copied).
DEFAULTS: dict[str, Any] = {
    "messages": [],
    "usage": {},
    "loaded_skills": [],
    "workspace": {},
    "attachments": [],
}

# version -> the change from it to the next (renames go here: pop the old key, set the new).
_STEPS: dict[int, Callable[[dict[str, Any]], None]] = {}


def _v1_to_v2(values: dict[str, Any]) -> None:
    values.setdefault("attachments", [])


def _v2_to_v3(values: dict[str, Any]) -> None:
    summary = values.get("summary")
    if isinstance(summary, dict) and "folded" not in summary:
        values["summary"] = {**summary, "folded": {"count": 0, "speakers": {}}}


def _unversioned(values: dict[str, Any]) -> None:
    """Checkpoints from before the version was recorded have version 1's fields."""


_STEPS[0] = _unversioned
_STEPS[1] = _v1_to_v2
_STEPS[2] = _v2_to_v3


def version_of(values: dict[str, Any]) -> int:
    """The schema version a checkpoint's values were written with (0: before versions)."""
    version = values.get("schema_version")
    return version if isinstance(version, int) and version >= 0 else 0


def migrate(values: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The values in the current shape, and what changed (to write with the next run).

    Unknown newer versions are left as they are (a newer service wrote them; an older one
    reading them must not rewrite them).
    """
    out = dict(values)
    version = version_of(out)
    while version < SCHEMA_VERSION:
        _STEPS.get(version, _unversioned)(out)
        version += 1
    for key, default in DEFAULTS.items():
        if out.get(key) is None:
            out[key] = type(default)()
    changes = {k: v for k, v in out.items() if k not in values or values[k] is not v}
    return out, changes
