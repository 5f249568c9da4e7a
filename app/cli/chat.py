"""``skilldesk chat``: a conversation in the terminal, in-process or with a running service."""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import urlsplit

import httpx
import typer
from langchain_core.messages import HumanMessage

from agents.events import RunFailed, RunFinished, Token
from app.cli.common import load_cli_settings
from app.logging import configure_logging
from app.settings import Settings

if TYPE_CHECKING:
    from openai import APIConnectionError, APIStatusError

# What a server without the route answers (no such path; it takes no POST there): not Skilldesk.
NO_ROUTE = (404, 405, 501)


def chat(
    url: Annotated[
        str | None,
        typer.Option(help="A running service, e.g. http://127.0.0.1:8000; default: in-process."),
    ] = None,
    thread: Annotated[str | None, typer.Option(help="Thread id to continue.")] = None,
    data_dir: Annotated[Path | None, typer.Option(help="Data directory (in-process).")] = None,
    api_key: Annotated[
        str | None,
        typer.Option(
            envvar="SKILLDESK_API_KEY",
            help="With --url: the API key of a service that has keys (`skilldesk keys create`).",
            show_envvar=True,
        ),
    ] = None,
) -> None:
    """Chat in the terminal. Empty line or Ctrl-D ends."""
    service = _service_url(url) if url else None
    thread_id = thread or uuid.uuid4().hex
    typer.echo(f"thread {thread_id} — empty line or Ctrl-D to quit", err=True)
    if service:
        ok = _chat_remote(service, thread_id, api_key)
    else:
        settings = load_cli_settings(data_dir=data_dir)
        # The service's log lines would interleave with the conversation: warnings only,
        # readable, on stderr, unless SKILLDESK_LOG_LEVEL / _FORMAT (or the config file) ask
        # otherwise. Without a model, every reply says which setting to give: the start-up
        # warning saying the same is left out.
        chosen = settings.model_fields_set
        quiet = "warning" if settings.model or settings.models_file else "error"
        level = settings.log_level if "log_level" in chosen else quiet
        configure_logging(level, settings.log_format if "log_format" in chosen else "console")
        ok = asyncio.run(_chat_local(settings, thread_id))
    if not ok:
        raise typer.Exit(1)  # a turn failed (the error was shown): scripts can tell


def _lines() -> Iterator[str]:
    while True:
        try:
            line = input("you> " if sys.stdin.isatty() else "")
        except EOFError:
            return
        if not line.strip():
            return
        yield line


def _service_url(url: str) -> str:
    """``url`` without a trailing slash; a usage error (exit 2) unless it is an http(s) address."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise typer.BadParameter(
            f"{url!r} is not the address of a service; write it as http://HOST:PORT, e.g. "
            "http://127.0.0.1:8000",
            param_hint="--url",
        )
    return url.strip().rstrip("/")


def _unreachable(url: str, exc: APIConnectionError) -> str:
    """Which service could not be reached, why, and what to do about it."""
    from openai import APITimeoutError

    if isinstance(exc, APITimeoutError):
        return f"the service at {url} did not answer in time; try again, or check its log"
    why: BaseException | None = exc.__cause__
    while why is not None and not (isinstance(why, OSError) and why.strerror):
        why = why.__cause__ or why.__context__
    reason = why.strerror if isinstance(why, OSError) else str(exc.__cause__ or exc)
    return (
        f"cannot reach the service at {url} ({reason}): start it with `skilldesk serve` "
        "(or `make run`), or give its address with --url"
    )


def _no_chat_route(exc: APIStatusError) -> bool:
    """Whether the server has no ``/v1/chat/completions``: an error status saying so, with no
    body of Skilldesk's saying why (a thread of another user's is a Skilldesk 404, say)."""
    if exc.status_code not in NO_ROUTE:
        return False
    body = exc.body  # the SDK's: a JSON body's ``error`` member, if any
    code = body.get("code") if isinstance(body, dict) else None
    return code in (None, "not_found", "method_not_allowed")  # Skilldesk's for no such route


def _not_skilldesk(url: str, status: int) -> str:
    """That the server at ``url`` is not a Skilldesk service, and what to do."""
    return (
        f"the server at {url} is not a Skilldesk service: it has no /v1/chat/completions "
        f"(HTTP {status}); check --url, the address `skilldesk serve` listens on "
        "(e.g. http://127.0.0.1:8000)"
    )


def _chat_remote(url: str, thread_id: str, api_key: str | None) -> bool:
    # Lazy: the OpenAI SDK is slow to import and only talking to a running service needs it.
    from openai import APIConnectionError, APIStatusError, AuthenticationError, OpenAI, OpenAIError

    client = OpenAI(
        base_url=f"{url}/v1",
        api_key=api_key or "skilldesk",  # a service without keys takes any
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
        except AuthenticationError as exc:
            typer.echo(f"error: {_refused(url, api_key, exc)}", err=True)
            return False  # every next message would be refused alike
        except APIConnectionError as exc:  # the next message may find the service started
            typer.echo(f"error: {_unreachable(url, exc)}", err=True)
            ok = False
        except APIStatusError as exc:
            if _no_chat_route(exc):  # every next message would go to the same wrong server
                typer.echo(f"error: {_not_skilldesk(url, exc.status_code)}", err=True)
                return False
            typer.echo(f"error: {exc}", err=True)
            ok = False
        except (OpenAIError, httpx.HTTPError) as exc:
            typer.echo(f"error: {exc}", err=True)
            ok = False
    return ok


async def _chat_local(settings: Settings, thread_id: str) -> bool:
    # Lazy: the services (graph, checkpointer, skills) load only for an in-process chat.
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


def _refused(url: str, api_key: str | None, exc: Any) -> str:
    """Why the service refused the conversation's key, and what to do."""
    if not api_key:  # the placeholder went: the service has keys
        return (
            f"the service at {url} needs an API key: give it with --api-key or "
            "SKILLDESK_API_KEY (an admin makes one with `skilldesk keys create`)"
        )
    body = getattr(exc, "body", None)
    error = body.get("error", body) if isinstance(body, dict) else None
    said = error.get("message") if isinstance(error, dict) else None
    return f"the service at {url} refused the key given ({said or exc.message})"
