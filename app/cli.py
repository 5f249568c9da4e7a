"""The ``skilldesk`` command line."""

from __future__ import annotations

import asyncio
import sys
import uuid
from pathlib import Path
from typing import Annotated, Any

import typer

from agents.errors import ConfigError

cli = typer.Typer(
    help="Skilldesk: a multi-agent chatbot service with skill plugins.",
    no_args_is_help=True,
    add_completion=False,
)


def _register_subcommands() -> None:
    from app.skills_cli import app as skills_app

    cli.add_typer(skills_app, name="skills")


def main() -> None:
    """Console-script entry point."""
    cli()


_register_subcommands()


def load_cli_settings(**overrides: Any) -> Any:
    """Settings with command-line overrides; a configuration error exits with status 2."""
    from app.settings import load_settings

    try:
        settings = load_settings(**overrides)
        settings.models()  # model profiles are validated before anything starts
    except ConfigError as exc:
        typer.echo(f"skilldesk: configuration error: {exc}", err=True)
        raise typer.Exit(2) from None
    return settings


@cli.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Bind address [SKILLDESK_HOST].")] = None,
    port: Annotated[int | None, typer.Option(help="Port [SKILLDESK_PORT].")] = None,
    data_dir: Annotated[
        Path | None, typer.Option(help="SQLite file and caches [SKILLDESK_DATA_DIR].")
    ] = None,
    skills_dir: Annotated[
        Path | None, typer.Option(help="Skills folder to serve [SKILLDESK_SKILLS_DIR].")
    ] = None,
) -> None:
    """Serve the HTTP API (default http://127.0.0.1:8000)."""
    import uvicorn

    from app.logging import configure_logging
    from app.main import create_app

    settings = load_cli_settings(host=host, port=port, data_dir=data_dir, skills_dir=skills_dir)
    configure_logging(settings.log_level, settings.log_format)
    uvicorn.run(
        create_app(settings, freeze_heap=True),
        host=settings.host,
        port=settings.port,
        log_config=None,
        access_log=False,
    )


@cli.command()
def chat(
    url: Annotated[
        str | None,
        typer.Option(help="A running service, e.g. http://127.0.0.1:8000; default: in-process."),
    ] = None,
    thread: Annotated[str | None, typer.Option(help="Thread id to continue.")] = None,
    data_dir: Annotated[Path | None, typer.Option(help="Data directory (in-process).")] = None,
) -> None:
    """Chat in the terminal. Empty line or Ctrl-D ends."""
    from app.logging import configure_logging

    thread_id = thread or uuid.uuid4().hex
    typer.echo(f"thread {thread_id} — empty line or Ctrl-D to quit", err=True)
    if url:
        ok = _chat_remote(url.rstrip("/"), thread_id)
    else:
        settings = load_cli_settings(data_dir=data_dir)
        # The service's log lines would interleave with the conversation: warnings only,
        # on stderr, unless SKILLDESK_LOG_LEVEL (or the config file) asks for more.
        level = settings.log_level if "log_level" in settings.model_fields_set else "warning"
        configure_logging(level, settings.log_format)
        ok = asyncio.run(_chat_local(settings, thread_id))
    if not ok:
        raise typer.Exit(1)  # a turn failed (the error was shown): scripts can tell


def _lines() -> Any:
    while True:
        try:
            line = input("you> " if sys.stdin.isatty() else "")
        except EOFError:
            return
        if not line.strip():
            return
        yield line


def _chat_remote(url: str, thread_id: str) -> bool:
    import httpx
    from openai import OpenAI, OpenAIError

    client = OpenAI(
        base_url=f"{url}/v1",
        api_key="skilldesk",
        default_headers={"X-Thread-Id": thread_id},
        max_retries=0,
    )
    ok = True
    for line in _lines():
        try:
            stream = client.chat.completions.create(
                model="skilldesk", messages=[{"role": "user", "content": line}], stream=True
            )
            for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    typer.echo(chunk.choices[0].delta.content, nl=False)
            typer.echo()
        except (OpenAIError, httpx.HTTPError) as exc:
            typer.echo(f"error: {exc}", err=True)
            ok = False
    return ok


async def _chat_local(settings: Any, thread_id: str) -> bool:
    from langchain_core.messages import HumanMessage

    from agents.events import RunFailed, RunFinished, Token
    from app.services import open_services

    ok = True
    async with open_services(settings) as services:
        for line in _lines():
            streamed = False
            async for event in services.conversations.stream(
                thread_id, [HumanMessage(content=line)]
            ):
                if isinstance(event, Token):
                    streamed = True
                    typer.echo(event.text, nl=False)
                elif isinstance(event, RunFinished) and not streamed:
                    typer.echo(event.message.text, nl=False)
                elif isinstance(event, RunFailed):
                    typer.echo(f"error: {event.message}", err=True)
                    ok = False
            typer.echo()
    return ok
