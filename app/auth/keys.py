"""API keys: stored hashed in the documents table beside the checkpoints (SHA-256 of a
high-entropy token, which is shown once, when it is made), or given for bootstrap in a keys
file or ``SKILLDESK_API_KEYS`` (kept in memory, hashed too). A stored key may expire; a
revoked one is kept, marked, so that a request with it is told it was revoked."""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, Field, ValidationError, field_validator

from agents import yamlsafe
from agents.errors import ConfigError
from agents.state.documents import Documents
from app.auth.principal import SCOPES, Principal

KIND = "api_key"
PREFIX = "sdk_"


def digest(token: str) -> str:
    """The stored form of a token: its SHA-256, hex (a token has 256 bits of entropy, so a
    plain hash is enough; no salt or slow hash is needed)."""
    return hashlib.sha256(token.encode()).hexdigest()


def public_id(hashed: str) -> str:
    """A key's public id, shown in listings and logs, from its hash."""
    return f"key_{hashed[:12]}"


_PAGE = 500  # keys read at a time by a listing of all of them
SHA256_HEX = r"^[0-9a-f]{64}$"  # a key kept by its SHA-256 only
MAX_LIFE_S = 10 * 365 * 86400  # ten years: a key meant to live longer is one that never expires

Revoked = Literal["revoked", "revoked_already", "from_settings", "unknown"]


@dataclass(frozen=True)
class KeyRecord:
    """What is kept of a key (never the token)."""

    id: str
    user: str
    scopes: tuple[str, ...]
    name: str
    created: float
    source: str = "store"  # or "bootstrap"
    expires: float | None = None  # Unix time; None: never
    revoked: float | None = None  # when it was revoked

    def expired(self, now: float | None = None) -> bool:
        """Whether the key's time is up."""
        return self.expires is not None and (time.time() if now is None else now) >= self.expires

    def principal(self) -> Principal:
        """The principal a request with this key acts as."""
        return Principal(user=self.user, scopes=frozenset(self.scopes), key_id=self.id)


def key_view(key: KeyRecord) -> dict[str, Any]:
    """What a listing shows of a key (never the token, nor its hash)."""
    return {
        "id": key.id,
        "user": key.user,
        "scopes": list(key.scopes),
        "name": key.name,
        "created": key.created or None,
        "source": key.source,
        "expires": key.expires,
        "revoked": key.revoked,
    }


# A user id: no blank one, none with spaces around it or control characters in it (it is
# the owner of threads and runs, compared as it is, and shown in listings and logs).
USER_PATTERN = r"^[^\x00-\x20\x7f](?:[^\x00-\x1f\x7f]{0,198}[^\x00-\x20\x7f])?$"


class KeySpec(BaseModel):
    """One key of a keys file (YAML: a list of these, or ``{keys: [...]}``)."""

    model_config = {"extra": "forbid"}

    user: str = Field(min_length=1, max_length=200, description="The user the key acts as.")
    scopes: list[str] = Field(["chat"], description=f"Of {', '.join(SCOPES)}.")
    name: str = Field("", max_length=200, description="What the key is for.")
    token: str | None = Field(None, min_length=16, description="The key itself.")
    sha256: str | None = Field(
        None, pattern=SHA256_HEX, description="Or its SHA-256 (hex), to keep no secret."
    )

    @field_validator("scopes")
    @classmethod
    def _known(cls, value: list[str]) -> list[str]:
        return check_scopes(value)

    @field_validator("user")
    @classmethod
    def _a_user_id(cls, value: str) -> str:
        return check_user(value)


def check_user(user: str) -> str:
    """The user id, if it is one (``USER_PATTERN``); a ValueError says what is wrong."""
    if not re.fullmatch(USER_PATTERN, user):
        raise ValueError(
            f"user {user!r} is not a user id: 1 to 200 characters, no spaces around it and "
            "no control characters"
        )
    return user


def check_scopes(scopes: Sequence[str]) -> list[str]:
    """The scopes, each known; a ValueError names the unknown ones."""
    unknown = [s for s in scopes if s not in SCOPES]
    if unknown:
        raise ValueError(f"unknown scope(s) {', '.join(unknown)}; use {', '.join(SCOPES)}")
    return list(dict.fromkeys(scopes))


def bootstrap_keys(entries: str | None, keys_file: Path | None) -> dict[str, KeyRecord]:
    """Keys from ``SKILLDESK_API_KEYS`` (``user:scope,scope:token`` entries separated by
    spaces or ``;``) and from the keys file, by hash.

    Raises:
        ConfigError: naming the setting and the entry that is wrong.
    """
    specs: list[tuple[str, KeySpec]] = []
    for n, entry in enumerate((entries or "").replace(";", " ").split()):
        parts = entry.split(":", 2)
        where = f"SKILLDESK_API_KEYS entry {n + 1}"
        if len(parts) != 3:
            raise ConfigError(
                f"{where} is not user:scopes:token",
                fix="write e.g. alice:chat,tools:<a token of 16+ characters>",
            )
        user, scopes, token = parts
        scope_list = [s for s in scopes.split(",") if s]
        specs.append((where, _spec(where, user=user, scopes=scope_list, token=token)))
    if keys_file is not None:
        specs.extend(_file_specs(keys_file))
    keys: dict[str, KeyRecord] = {}
    for where, spec in specs:
        if (spec.token is None) == (spec.sha256 is None):
            raise ConfigError(f"{where}: give exactly one of token and sha256")
        hashed = spec.sha256 or digest(str(spec.token))
        keys[hashed] = KeyRecord(
            public_id(hashed), spec.user, tuple(spec.scopes), spec.name, 0.0, "bootstrap"
        )
    return keys


def _spec(where: str, **values: Any) -> KeySpec:
    try:
        return KeySpec(**values)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'entry'}: {e['msg']}" for e in exc.errors()
        )
        raise ConfigError(f"{where}: {problems}") from None


def _file_specs(path: Path) -> list[tuple[str, KeySpec]]:
    if not path.is_file():
        raise ConfigError(
            f"SKILLDESK_API_KEYS_FILE: {path} does not exist", fix="create it or unset it"
        )
    try:
        loaded = yamlsafe.load(path.read_text(encoding="utf-8"))
    except yamlsafe.YamlRefused as exc:
        raise ConfigError(f"SKILLDESK_API_KEYS_FILE: {path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"SKILLDESK_API_KEYS_FILE: {path} is not YAML: {exc}") from None
    if isinstance(loaded, dict):
        loaded = loaded.get("keys")
    if not isinstance(loaded, list):
        raise ConfigError(
            f"SKILLDESK_API_KEYS_FILE: {path} must hold a list of keys",
            fix="write `keys:` then entries of user, scopes and token or sha256",
        )
    return [
        (f"{path} key {n + 1}", _spec(f"{path} key {n + 1}", **(item or {})))
        for n, item in enumerate(loaded)
    ]


class ApiKeys:
    """The keys of a service: made and revoked in the store, plus the bootstrap ones."""

    def __init__(self, documents: Documents, bootstrap: dict[str, KeyRecord] | None = None):
        self.documents = documents
        self.bootstrap = dict(bootstrap or {})

    async def create(
        self,
        user: str,
        scopes: Sequence[str],
        name: str = "",
        expires_in: float | None = None,
    ) -> tuple[str, KeyRecord]:
        """A new key for ``user``: the token (to show once) and its record; ``expires_in``
        seconds from now it stops working (None: never)."""
        check_user(user)
        scopes = check_scopes(scopes)
        token = PREFIX + secrets.token_urlsafe(32)
        hashed = digest(token)
        now = time.time()
        expires = now + expires_in if expires_in is not None else None
        record = KeyRecord(public_id(hashed), user, tuple(scopes), name, now, expires=expires)
        body = {**record.__dict__, "scopes": list(scopes), "sha256": hashed}
        await self.documents.put(KIND, hashed, body, owner=user, updated=record.created)
        return token, record

    async def find(self, token: str) -> KeyRecord | None:
        """The key a token is (revoked or expired ones too: the caller says which), or
        None for a token that never was a key."""
        hashed = digest(token)
        if hashed in self.bootstrap:
            return self.bootstrap[hashed]
        body = await self.documents.get(KIND, hashed)
        return None if body is None else _record(body)

    async def page(
        self, user: str | None = None, limit: int = 100, after: str | None = None
    ) -> tuple[list[KeyRecord], str | None]:
        """The ``limit`` newest stored keys from the cursor ``after`` on (of one user when
        given), then, on the first page, the bootstrap ones; and the next page's cursor
        (None after the last). ValueError for a malformed cursor."""
        rows, more = await self.documents.find_page(KIND, owner=user, limit=limit, after=after)
        stored = [_record(body) for _, body in rows]
        boot = [k for k in self.bootstrap.values() if user in (None, k.user)]
        return stored + (boot if after is None else []), _shown(rows[-1][0]) if more else None

    async def all(self, user: str | None = None) -> list[KeyRecord]:
        """Every stored key (newest first), then the bootstrap ones; of one user when given."""
        stored: list[KeyRecord] = []
        after: str | None = None
        while True:
            rows, more = await self.documents.find_page(KIND, owner=user, limit=_PAGE, after=after)
            stored += [_record(body) for _, body in rows]
            if not more:
                break
            after = rows[-1][0]
        return stored + [k for k in self.bootstrap.values() if user in (None, k.user)]

    async def any(self) -> bool:
        """Whether any key is configured."""
        return bool(self.bootstrap) or bool(await self.documents.find(KIND, limit=1))

    async def revoke(self, key_id: str) -> tuple[Revoked, KeyRecord | None]:
        """Revoke a stored key by its public id (it is kept, marked revoked, so that a
        request with it is told so). Says how it went, with the key as it is now:
        ``revoked``, ``revoked_already``, ``from_settings`` (a bootstrap key: changed where it
        is configured) or ``unknown`` (no such key, None)."""
        for key in self.bootstrap.values():
            if key.id == key_id:
                return "from_settings", key
        # Stored under its hash, whose first characters the public id shows: one read of
        # the few keys that start so, however many keys there are.
        hashed_start = key_id.removeprefix("key_")
        if not hashed_start.isalnum() or not hashed_start.isascii():
            return "unknown", None
        for body in await self.documents.find(KIND, id_prefix=hashed_start, limit=100):
            if body.get("id") != key_id:
                continue
            if body.get("revoked"):
                return "revoked_already", _record(body)
            body["revoked"] = time.time()
            owner = str(body["user"])
            await self.documents.put(
                KIND, str(body["sha256"]), body, owner=owner, updated=body.get("created")
            )
            return "revoked", _record(body)
        return "unknown", None


def _shown(cursor: str) -> str:
    """A page cursor with the key's hash cut to what its public id shows: a key id never
    leaves the store whole. As a bound it is as good (only a key made at that very instant
    whose hash starts with the same twelve characters could be missed)."""
    made, _, hashed = cursor.partition(" ")
    return f"{made} {hashed[:12]}"


def _record(body: dict[str, Any]) -> KeyRecord:
    return KeyRecord(
        str(body["id"]),
        str(body["user"]),
        tuple(body.get("scopes") or ()),
        str(body.get("name") or ""),
        float(body.get("created") or 0),
        expires=body.get("expires"),
        revoked=body.get("revoked"),
    )
