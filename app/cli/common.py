"""What several command groups share: settings with the command line's overrides."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from agents.errors import ConfigError
from app.settings import Settings, load_settings

# The options of the commands that work on the service's store (threads, keys).
StoreUrl = Annotated[
    str | None,
    typer.Option("--checkpoint-url", help="The store [SKILLDESK_CHECKPOINT_URL]."),
]
DataDir = Annotated[
    Path | None,
    typer.Option("--data-dir", help="The SQLite file's folder [SKILLDESK_DATA_DIR]."),
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]


def load_cli_settings(**overrides: Any) -> Settings:
    """Settings with command-line overrides; a configuration error exits with status 2."""
    try:
        settings = load_settings(**overrides)
        settings.models()  # model profiles are validated before anything starts
    except ConfigError as exc:
        typer.echo(f"skilldesk: configuration error: {exc}", err=True)
        raise typer.Exit(2) from None
    return settings


def report_validation(
    loaded: Sequence[str],
    errors: Sequence[Any],
    *,
    as_json: bool,
    warnings: Sequence[Any] | None = None,
) -> None:
    """Print what loaded, each problem and each warning (``--json``: ``{"loaded", "errors",
    "warnings"}``, the last when ``warnings`` is given); exit 1 when there is any problem, so
    a CI step fails on it."""
    if as_json:
        body: dict[str, Any] = {"loaded": list(loaded), "errors": [vars(p) for p in errors]}
        if warnings is not None:
            body["warnings"] = [vars(w) for w in warnings]
        typer.echo(json.dumps(body, ensure_ascii=False))
    else:
        for name in loaded:
            typer.echo(f"ok      {name}")
        for warning in warnings or ():
            typer.echo(f"warning {warning}")
        for problem in errors:
            typer.echo(f"error   {problem}")
        counted = f", {len(warnings)} warning(s)" if warnings else ""
        typer.echo(f"{len(loaded)} loaded, {len(errors)} problem(s){counted}")
    if errors:
        raise typer.Exit(1)
