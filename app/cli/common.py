"""What several command groups share: the ``Typer`` they are made with (a configuration
error exits with status 2), settings with the command line's overrides (and the check that
the service's store, or its data folder, is there), the services opened on the store beside a
live server, the common options, messages in the command line's terms."""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import re
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from agents.errors import ConfigError, SkilldeskError
from agents.state.checkpointers import sqlite_path
from app.settings import Settings, load_settings
from app.settings.service import ServiceSettings

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
T = TypeVar("T")
_LITERAL = re.compile(r"``(.+?)``", re.DOTALL)  # reST's inline literal, in a docstring
# The HTTP routes that errors from agents/ (written for the API) name, as commands.
_AS_COMMANDS = {
    re.compile(r"GET /v1/threads/([A-Za-z0-9][A-Za-z0-9._:-]*)/history\b"): (
        r"`skilldesk threads history \1`"
    ),
}


def flowing(text: str) -> str:
    """``text`` (a docstring) with each paragraph on one line, for the terminal to wrap, and
    its reST literals (in double backquotes) in single ones, as the commands' messages quote.
    As in click, a paragraph that starts with ``\\b`` keeps its lines and ``\\f`` ends the
    help."""
    paragraphs = _LITERAL.sub(r"`\1`", inspect.cleandoc(text).partition("\f")[0]).split("\n\n")
    return "\n\n".join(p if p.startswith("\b") else " ".join(p.split()) for p in paragraphs)


def in_cli_terms(message: str) -> str:
    """``message``, an error written for the API, naming the command that does what each
    HTTP route it names does (``skilldesk threads history ID`` for its history route)."""
    for route, command in _AS_COMMANDS.items():
        message = route.sub(command, message)
    return message


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


def load_cli_settings(
    *,
    store: bool = False,
    create_option: str | None = None,
    records: bool = False,
    **overrides: Any,
) -> Settings:
    """Settings with command-line overrides; a configuration error exits with status 2.

    Args:
        store: The command works on the service's store, which must be there: an SQLite
            file that does not exist (a mistyped ``--data-dir``, say) is a configuration
            error, rather than a new, empty store that no service reads.
        create_option: The command's option that makes a new store (named in the fix).
        records: The command reads the records of name owners the service keeps in its data
            folder: a data folder named (``--data-dir``, ``SKILLDESK_DATA_DIR``) that does not
            exist is a configuration error, rather than read as one without records. The
            default folder may be missing: no service ran there yet (a first start's case).
        **overrides: Settings given on the command line (``None``: not given).
    """
    with configuration_errors():
        settings = load_settings(**overrides)
        settings.models()  # model profiles are validated before anything starts
        missing = missing_store(settings) if store else None
        if missing is not None:
            raise _no_store(settings, missing, create_option)
        if records and "data_dir" in settings.model_fields_set:
            check_data_dir(settings.data_dir, "--data-dir / SKILLDESK_DATA_DIR")
    return settings


def check_data_dir(folder: Path, named_by: str) -> None:
    """That ``folder``, a data folder the user named (by ``named_by``) for the records of
    which skill owns each tool and which file each workflow name, is there.

    Raises:
        ConfigError: it does not exist (a mistyped folder would otherwise be read as one
            without records, and the check pass where the service refuses).
    """
    if folder.is_dir():
        return
    what = "is not a folder" if folder.exists() else "does not exist"
    raise ConfigError(
        f"the data folder {folder} ({named_by}) {what}, so it holds no records of which "
        "skill owns each tool and which file each workflow name",
        fix="give the data folder of the service whose skills and workflows these are (its "
        "--data-dir or SKILLDESK_DATA_DIR); to check as a first start would, with no "
        "records, give an empty folder",
    )


def on_the_store(
    settings: Settings, job: Callable[[Any], Awaitable[T]], *, light: bool = True
) -> T:
    """Open the services on the settings' store as a command beside a live server does (no
    background work: it must not resume the server's runs; no watching), run ``job`` on
    them. A Skilldesk error exits with status 1, said in the command line's terms; a
    configuration error (a store that does not answer) with 2, as every command's.

    Args:
        light: Without skill retrieval's embeddings: the command runs no turn and no
            workflow, so keyword-only skills, loaded at once, are enough.
    """
    from app.services import open_services  # lazy: the whole service loads only here

    if light:
        settings = settings.model_copy(update={"skills_embeddings": False})

    async def go() -> T:
        async with open_services(settings, watch=False, background=False) as services:
            return await job(services)

    try:
        return asyncio.run(go())
    except ConfigError:
        raise  # said by the command's ``configuration_errors`` (``Typer``)
    except SkilldeskError as exc:
        typer.echo(f"skilldesk: {in_cli_terms(str(exc))}", err=True)
        raise typer.Exit(1) from None


def sqlite_file(url: str) -> Path | None:
    """The file an SQLite checkpoint URL names; None for PostgreSQL or a store in memory."""
    path = sqlite_path(url)
    return Path(path) if path not in (None, ":memory:") else None


def missing_store(settings: Settings) -> Path | None:
    """The SQLite file of the settings' store when it does not exist (opening it would make
    a new, empty one); None when it does, or when the store is not such a file."""
    path = sqlite_file(settings.resolved_checkpoint_url)
    return path if path is not None and not path.exists() else None


def _no_store(settings: Settings, path: Path, create_option: str | None) -> ConfigError:
    """That the store the settings name is not there, which setting named it, and where the
    service keeps its store."""
    default = sqlite_file(ServiceSettings().resolved_checkpoint_url)  # the data folder's
    name = default.name if default is not None else "an SQLite file"
    if settings.checkpoint_url:
        what = (
            f"the SQLite store {path} (--checkpoint-url / SKILLDESK_CHECKPOINT_URL) does not exist"
        )
    else:
        folder = settings.data_dir
        what = (
            f"the data folder {folder} (--data-dir / SKILLDESK_DATA_DIR)"
            if "data_dir" in settings.model_fields_set
            else f"the default data folder {folder} (no --data-dir or SKILLDESK_DATA_DIR given)"
        )
        what += f" holds no store (no {name} in it)" if folder.exists() else " does not exist"
    fix = (
        "give the data folder of the service whose store this is (its --data-dir or "
        "SKILLDESK_DATA_DIR), or its SKILLDESK_CHECKPOINT_URL"
    )
    if create_option:
        fix += (
            f"; to make a new store there, for a service to be started on it, add {create_option}"
        )
    return ConfigError(
        f"{what}, so no service has kept its store there. The service keeps its store in its "
        f"data folder, as {name} (`skilldesk serve --data-dir DIR` or SKILLDESK_DATA_DIR; by "
        f"default {default}), or where SKILLDESK_CHECKPOINT_URL says",
        fix=fix,
    )


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
