"""What several command groups share: the ``Typer`` they are made with (a configuration
error exits with status 2), settings with the command line's overrides, the common options."""

from __future__ import annotations

import functools
import inspect
import json
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
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
# What the folder holds, whichever part a command reads: the store (unless a checkpoint URL
# names another), and the records of which skill owns a tool, which file a workflow name.
DataDir = Annotated[
    Path | None,
    typer.Option(
        "--data-dir",
        help="The service's data folder: its SQLite store, caches and records of tool and "
        "workflow owners [SKILLDESK_DATA_DIR].",
    ),
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]

F = TypeVar("F", bound=Callable[..., Any])
_LITERAL = re.compile(r"``(.+?)``", re.DOTALL)  # reST's inline literal, in a docstring


def flowing(text: str) -> str:
    """``text`` (a docstring) with each paragraph on one line, for the terminal to wrap, and
    its reST literals (in double backquotes) in single ones, as the commands' messages quote.
    As in click, a paragraph that starts with ``\\b`` keeps its lines and ``\\f`` ends the
    help."""
    paragraphs = _LITERAL.sub(r"`\1`", inspect.cleandoc(text).partition("\f")[0]).split("\n\n")
    return "\n\n".join(p if p.startswith("\b") else " ".join(p.split()) for p in paragraphs)


@contextmanager
def configuration_errors() -> Iterator[None]:
    """A ``ConfigError`` in the block (a bad setting, a store that does not answer) is said
    as a configuration error, and the command exits with status 2, as for a bad option."""
    try:
        yield
    except ConfigError as exc:
        typer.echo(f"skilldesk: configuration error: {exc}", err=True)
        raise typer.Exit(2) from None


class Typer(typer.Typer):
    """``typer.Typer`` whose help flows as paragraphs, and whose commands each run in
    ``configuration_errors``: none prints a traceback for a store it cannot reach.

    Typer prints a command's help in its group's listing with the line breaks of the source
    (docstrings wrap at 100 columns), so ``--help`` would cut sentences mid-line at any
    terminal width."""

    def __init__(self, **options: Any) -> None:
        if isinstance(options.get("help"), str):
            options["help"] = flowing(options["help"])
        super().__init__(**options)

    def command(self, name: str | None = None, **options: Any) -> Callable[[F], F]:
        """Register a command, its help (``help=`` or the docstring) flowing, its
        configuration errors said plainly; ``f`` itself is returned unchanged."""
        register = super().command

        def decorator(f: F) -> F:
            text = options.get("help") or inspect.getdoc(f)

            @functools.wraps(f)  # typer reads the options from the signature it points to
            def plainly(*args: Any, **kwargs: Any) -> Any:
                with configuration_errors():
                    return f(*args, **kwargs)

            register(name, **{**options, "help": flowing(text) if text else None})(plainly)
            return f

        return decorator


def load_cli_settings(**overrides: Any) -> Settings:
    """Settings with command-line overrides; a configuration error exits with status 2."""
    with configuration_errors():
        settings = load_settings(**overrides)
        settings.models()  # model profiles are validated before anything starts
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
