"""``skilldesk keys create|list|revoke``: the API keys of the store the service uses (the
same settings). A key is shown once, when it is made; the store keeps only its hash."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, TypeVar

import typer

from agents.state.checkpointers import open_checkpointer
from agents.state.documents import documents_for
from app.auth.keys import (
    MAX_LIFE_S,
    ApiKeys,
    KeyRecord,
    bootstrap_keys,
    check_scopes,
    check_user,
    key_view,
)
from app.auth.principal import SCOPES
from app.cli.common import (
    DataDir,
    JsonFlag,
    StoreUrl,
    Typer,
    load_cli_settings,
    missing_store,
)
from app.logging import configure_logging

cli = Typer(help="Create, list and revoke API keys.", no_args_is_help=True)
T = TypeVar("T")


@cli.callback()
def _quiet_logs() -> None:
    configure_logging("error", "console")


def _run(
    url: str | None,
    data_dir: Path | None,
    job: Callable[[ApiKeys], Awaitable[T]],
    *,
    create: bool | None = None,
) -> T:
    """Open the store's keys (and the bootstrap ones of the settings), run ``job``.

    A store that is not there is a configuration error (exit 2), unless ``create`` (`keys
    create --create`; None: the command has no such option): then it is made, and said so
    on stderr, since only a service started on it sees the key.
    """
    settings = load_cli_settings(
        store=not create,
        create_option="--create" if create is not None else None,
        checkpoint_url=url,
        data_dir=data_dir,
    )
    made = missing_store(settings)

    async def go() -> T:
        secret = settings.api_keys.get_secret_value() if settings.api_keys else None
        bootstrap = bootstrap_keys(secret, settings.api_keys_file)
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        async with open_checkpointer(settings.resolved_checkpoint_url) as saver:
            return await job(ApiKeys(documents_for(saver), bootstrap))

    done = asyncio.run(go())  # a store that does not answer: exit 2, naming it (Typer)
    if made is not None:
        serve = (
            f"SKILLDESK_CHECKPOINT_URL={settings.checkpoint_url}"
            if settings.checkpoint_url
            else f"`skilldesk serve --data-dir {made.parent}`"
        )
        typer.echo(
            f"skilldesk: made a NEW store at {made} (there was none): only a service started "
            f"on it ({serve}) sees this key",
            err=True,
        )
    return done


UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(text: str) -> float:
    """Seconds in ``30d``, ``12h``, ``15m`` or ``90s``."""
    number, unit = text.strip()[:-1], text.strip()[-1:].lower()
    try:
        seconds = float(number) * UNITS[unit]
    except (KeyError, ValueError):
        raise typer.BadParameter(
            f"{text!r} is not a duration; write e.g. 30d, 12h, 15m or 90s"
        ) from None
    if not 0 < seconds <= MAX_LIFE_S:  # nan fails both
        raise typer.BadParameter(
            f"{text!r}: a key's life is more than nothing and at most 3650d "
            "(leave --expires-in out for a key that never expires)"
        )
    return seconds


def _state(key: KeyRecord) -> str:
    if key.revoked is not None:
        return "revoked " + time.strftime("%Y-%m-%d %H:%M", time.localtime(key.revoked))
    if key.expires is None:
        return "in force"
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(key.expires))
    return f"expired {when}" if key.expired() else f"expires {when}"


@cli.command()
def create(
    user: Annotated[str, typer.Argument(help="The user id the key acts as.")],
    scope: Annotated[
        list[str] | None,
        typer.Option(
            "--scope", "-s", help=f"Repeat for each: {', '.join(SCOPES)}; chat when none is given."
        ),
    ] = None,
    name: Annotated[str, typer.Option(help="What the key is for.")] = "",
    expires_in: Annotated[
        str | None,
        typer.Option(
            help="It stops working after this long: 30d, 12h, 15m, 90s; never if left out."
        ),
    ] = None,
    create: Annotated[
        bool,
        typer.Option(
            "--create",
            help="Make the store if there is none yet (a new installation): only a service "
            "started on it sees the key.",
        ),
    ] = False,
    checkpoint_url: StoreUrl = None,
    data_dir: DataDir = None,
    as_json: JsonFlag = False,
) -> None:
    """Make a key for USER and print it: it is shown this once (the store keeps its hash).
    The store must be there (a service made it) unless --create."""
    life = duration(expires_in) if expires_in is not None else None
    try:
        check_user(user)
        scopes = check_scopes(scope or ["chat"])
    except ValueError as exc:
        typer.echo(f"skilldesk: {exc}", err=True)
        raise typer.Exit(2) from None
    token, key = _run(
        checkpoint_url,
        data_dir,
        lambda keys: keys.create(user, scopes, name, life),
        create=create,
    )
    if as_json:
        typer.echo(json.dumps({**key_view(key), "key": token}))
        return
    typer.echo(f"{key.id} for {user} ({', '.join(key.scopes)}), {_state(key)}")
    typer.echo(token)
    typer.echo("Keep it now: it is not shown again. Send it as `Authorization: Bearer <key>`.")


@cli.command("list")
def list_keys(
    user: Annotated[str | None, typer.Option(help="Only this user's keys.")] = None,
    checkpoint_url: StoreUrl = None,
    data_dir: DataDir = None,
    as_json: JsonFlag = False,
) -> None:
    """The keys (never the keys themselves: their ids, users and scopes)."""
    keys = _run(checkpoint_url, data_dir, lambda k: k.all(user))
    if as_json:
        typer.echo(json.dumps([key_view(k) for k in keys]))
        return
    for k in keys:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(k.created)) if k.created else "-"
        typer.echo(
            f"{k.id}  {k.user:<20} {','.join(k.scopes):<24} {when}  {k.source}  "
            f"{_state(k)}  {k.name}".rstrip()
        )
    if not keys:
        typer.echo("no keys: the service is open on loopback only (development mode)")


@cli.command()
def revoke(
    key_id: Annotated[str, typer.Argument(help="The key's id (key_...), from `keys list`.")],
    checkpoint_url: StoreUrl = None,
    data_dir: DataDir = None,
) -> None:
    """Revoke a key: requests with it are refused from now on."""

    outcome, _ = _run(checkpoint_url, data_dir, lambda keys: keys.revoke(key_id))
    refused = {
        "from_settings": f"{key_id} comes from SKILLDESK_API_KEYS or the keys file; "
        "remove it there and restart",
        "revoked_already": f"{key_id} was revoked already",
        "unknown": f"no key {key_id}; `skilldesk keys list` shows them",
    }
    if outcome in refused:
        typer.echo(f"skilldesk: {refused[outcome]}", err=True)
        raise typer.Exit(1)
    typer.echo(f"revoked {key_id}")
