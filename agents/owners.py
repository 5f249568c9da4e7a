"""Who owns each global name (a tool across skills, a workflow across files), kept in a small
JSON file in the data folder.

A registry refuses a newcomer that declares a name another definition already serves. Kept
only in memory, "already" would end at a restart and the folder's order would choose again:
a newcomer that sorts first would take the name, and a side-effecting tool with it.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Literal

import structlog
from pydantic import BaseModel, Field, ValidationError

log = structlog.get_logger(__name__)


class OwnersRecord(BaseModel):
    """The file's content."""

    schema_version: Literal[1] = Field(1, description="Shape of this record.")
    owners: dict[str, str] = Field(
        default_factory=dict,
        description="Name → its owner: a skill's folder name, or a workflow's file name.",
    )


class OwnersFile:
    """One registry's owners, replaced whole at each change (a temporary file, then
    ``os.replace``), so a reader never sees half of it.

    Args:
        path: The file (its folder is created when first written).
        write: Whether to keep it up to date. The service does; a command-line tool reads the
            service's file and leaves it alone (it may look at other folders).
    """

    def __init__(self, path: Path, *, write: bool = True) -> None:
        self.path = path
        self.write = write

    def read(self) -> dict[str, str]:
        """The recorded owners; none without a file. A damaged file is logged and read as
        none, so the registry decides as at a first start rather than not starting."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        except (OSError, UnicodeDecodeError) as exc:
            return self._unreadable(str(exc))
        try:
            return OwnersRecord.model_validate_json(text).owners
        except ValidationError as exc:
            return self._unreadable(str(exc.errors(include_url=False)[0]["msg"]))

    def save(self, owners: dict[str, str]) -> None:
        """Record ``owners`` (when writing); a failure is logged, the registry goes on."""
        if not self.write:
            return
        text = OwnersRecord(owners=dict(sorted(owners.items()))).model_dump_json(indent=2)
        temp = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, temp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}-")
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(text + "\n")
            os.replace(temp, self.path)
        except OSError as exc:
            if temp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(temp)
            log.warning("owners.unwritable", file=str(self.path), error=str(exc))

    def _unreadable(self, error: str) -> dict[str, str]:
        log.warning(
            "owners.unreadable",
            file=str(self.path),
            error=error,
            fix="nothing to do: the oldest definition of each contested name wins, and the "
            "file is written again",
        )
        return {}


def tool_owners(data_dir: Path, *, write: bool = True) -> OwnersFile:
    """The owners of tool names, in the data folder ``data_dir``."""
    return OwnersFile(data_dir / "owners" / "tools.json", write=write)


def workflow_owners(data_dir: Path, *, write: bool = True) -> OwnersFile:
    """The owners of workflow names, in the data folder ``data_dir``."""
    return OwnersFile(data_dir / "owners" / "workflows.json", write=write)
