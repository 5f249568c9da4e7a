"""``skilldesk serve``: the HTTP API in one uvicorn process."""

from __future__ import annotations

import asyncio
import errno
import math
import socket
from pathlib import Path
from typing import Annotated

import typer

from agents.errors import ConfigError
from app.cli.common import load_cli_settings
from app.logging import configure_logging


def serve(
    host: Annotated[str | None, typer.Option(help="Bind address [SKILLDESK_HOST].")] = None,
    port: Annotated[int | None, typer.Option(help="Port [SKILLDESK_PORT].")] = None,
    data_dir: Annotated[
        Path | None, typer.Option(help="SQLite file and caches [SKILLDESK_DATA_DIR].")
    ] = None,
    skills_dir: Annotated[
        Path | None, typer.Option(help="Skills folder to serve [SKILLDESK_SKILLS_DIR].")
    ] = None,
    workflows_dir: Annotated[
        Path | None, typer.Option(help="Workflows folder to serve [SKILLDESK_WORKFLOWS_DIR].")
    ] = None,
) -> None:
    """Serve the HTTP API (default http://127.0.0.1:8000)."""
    # Lazy: the web stack and the app load only to serve, so other commands start faster.
    import uvicorn

    from app.auth.guard import refusal
    from app.main import create_app
    from app.services import check_stores
    from app.shutdown import StoppingServer

    settings = load_cli_settings(
        host=host,
        port=port,
        data_dir=data_dir,
        skills_dir=skills_dir,
        workflows_dir=workflows_dir,
    )
    configure_logging(settings.log_level, settings.log_format)
    taken = _taken(settings.host, settings.port)
    if taken is not None:  # before a start-up of seconds (skills, the stores) that would fail
        typer.echo(f"skilldesk: {taken}", err=True)
        raise typer.Exit(2)
    # Said plainly before the server starts, as any command's configuration error (exit 2).
    asyncio.run(check_stores(settings))  # PostgreSQL and Redis answer, else say which
    problem = asyncio.run(refusal(settings))
    if problem is not None:
        raise ConfigError(problem)
    config = uvicorn.Config(
        create_app(settings, freeze_heap=True, stores_checked=True),
        host=settings.host,
        port=settings.port,
        log_config=None,
        access_log=False,
        timeout_keep_alive=max(1, round(settings.keep_alive_s)),
        # Streams that cannot hand over (no Redis) may follow their run this long; a second
        # more, so that streamed workflow runs, let go at the grace's end (``Cutoffs``), have
        # time to release their runs and say so before uvicorn cuts them off.
        timeout_graceful_shutdown=math.ceil(settings.shutdown_grace_s) + 1,
    )
    StoppingServer(config).run()


def _taken(host: str, port: int) -> str | None:
    """Why the service cannot listen on ``host:port`` (another process has it, say), or None:
    told at once rather than after the start-up."""
    if port == 0:
        return None
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind((host, port))
        except OSError as exc:
            taken = exc.errno == errno.EADDRINUSE
            why = "another process listens there" if taken else (exc.strerror or str(exc))
            return (
                f"cannot listen on {host}:{port}: {why}; give another address with --host "
                "and --port (SKILLDESK_HOST, SKILLDESK_PORT)"
            )
    return None
