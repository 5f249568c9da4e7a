"""What several command groups share: the ``Typer`` they are made with, settings with the
command line's overrides, the options of the service's store."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from agents.errors import ConfigError
from app.settings import Settings, load_settings

# The options of the commands that work on the service's store (threads, keys, skills examples).
StoreUrl = Annotated[
    str | None,
    typer.Option("--checkpoint-url", help="The store [SKILLDESK_CHECKPOINT_URL]."),
]
DataDir = Annotated[
    Path | None,
    typer.Option("--data-dir", help="The SQLite file's folder [SKILLDESK_DATA_DIR]."),
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]

F = TypeVar("F", bound=Callable[..., Any])


def flowing(text: str) -> str:
    """``text`` (a docstring) with each paragraph on one line, for the terminal to wrap. As in
    click, a paragraph that starts with ``\\b`` keeps its lines and ``\\f`` ends the help."""
    paragraphs = inspect.cleandoc(text).partition("\f")[0].split("\n\n")
    return "\n\n".join(p if p.startswith("\b") else " ".join(p.split()) for p in paragraphs)


class Typer(typer.Typer):
    """``typer.Typer`` whose help flows as paragraphs. Typer prints a command's help in its
    group's listing with the line breaks of the source (docstrings wrap at 100 columns), so
    ``--help`` would cut sentences mid-line at any terminal width."""

    def __init__(self, **options: Any) -> None:
        if isinstance(options.get("help"), str):
            options["help"] = flowing(options["help"])
        super().__init__(**options)

    def command(self, name: str | None = None, **options: Any) -> Callable[[F], F]:
        """Register a command, its help (``help=`` or the docstring) flowing."""
        register = super().command

        def decorator(f: F) -> F:
            text = options.get("help") or inspect.getdoc(f)
            return register(name, **{**options, "help": flowing(text) if text else None})(f)

        return decorator


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
