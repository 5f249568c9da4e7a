"""Idempotency-Keys across processes: a key names one run, whichever process each of its
requests reached (``KeyClaims``, part of ``RunBus``)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import uuid
from collections.abc import Callable
from typing import Any

import structlog

from agents.bus.common import LIVE_TTL_S, as_text, digest_of, never_began
from agents.bus.scripts import TAKE_OVER
from agents.errors import KeyReused

log = structlog.get_logger(__name__)


class KeyClaims:
    """The key claims of ``RunBus`` (which it is mixed into): a key is claimed in Redis for
    the run its first request starts, for as long as that run may go on."""

    client: Any
    prefix: str

    async def status(self, run_id: str) -> dict[str, Any] | None:
        raise NotImplementedError  # RunBus's

    async def claim(self, thread_id: str, key: str, run_id: str, asks: str = "") -> tuple[str, str]:
        """The run that answers the client's ``key`` on the thread, in whichever process, and
        what its request asked (a digest of ``asks``, its fingerprint): ``run_id`` when no
        request brought the key before (it is claimed for ``retain_s``), else the run that
        request started. Redis unreachable: ``run_id`` (this process still joins the key's
        runs it has itself)."""
        name = self._key_name(thread_id, key)
        mine = f"{run_id} {digest_of(asks)}"
        try:
            # Kept while its run may still go on; the run's status expiring says it ended long ago.
            if await self.client.set(name, mine, nx=True, ex=LIVE_TTL_S):
                return run_id, digest_of(asks)
            found = await self.client.get(name)
        except Exception as exc:
            log.warning("bus.key_not_claimed", thread_id=thread_id, error=str(exc))
            return run_id, digest_of(asks)
        owner, _, digest = as_text(found or mine).partition(" ")
        return owner, digest

    async def claim_run(
        self, thread_id: str, key: str, here: Callable[[str], object], asks: str = ""
    ) -> tuple[str | None, str | None]:
        """Where a request with the client's ``key`` is answered: ``(run_id, None)``, the id
        of the run it starts (the key is claimed for it), or ``(None, run_id)``, the run a
        request with the same key started in another process (a client's retry sent
        elsewhere by the load balancer: one run, whatever process each try reached);
        ``(None, None)`` when ``here(run_id)`` finds the key's run in this process (which
        joins it by the key). A key whose run never started (its request was refused) or
        ended long ago is claimed again for the new run.

        Raises:
            KeyReused: the key's first request asked something else than ``asks`` (the
                turn's fingerprint).
        """
        mine = str(uuid.uuid4())
        owner, digest = await self.claim(thread_id, key, mine, asks)
        if owner == mine:
            return mine, None
        if here(owner):  # this process joins it by the key (or refuses another message)
            return None, None
        # The run's status is written just after its claim: a retry close behind waits for it.
        # Its status kept (while it runs, and ``retain_s`` after) is how long the key holds.
        for _ in range(20):
            status = await self.status(owner)
            if status is not None:
                if status.get("thread_id") != thread_id:
                    return mine, None
                if digest and digest != digest_of(asks):
                    raise KeyReused.for_message(key, thread_id, owner)
                if not never_began(status):
                    return None, owner
                # Its process died (or was taken for dead) with it queued and its message was
                # not kept: it never runs (``begin``), and the retry the failure asks for is a
                # new run (unless another retry's came first).
                owner, digest = await self._take_over(thread_id, key, owner, mine, asks)
                if owner == mine:
                    return mine, None
                continue  # another retry's run took the key: this one joins it
            await asyncio.sleep(0.05)
        await self.reclaim(thread_id, key, mine, asks)  # its run never started, or is gone
        return mine, None

    async def reclaim(self, thread_id: str, key: str, run_id: str, asks: str = "") -> None:
        """The key's run is ``run_id`` after all (the run it named never started)."""
        with contextlib.suppress(Exception):
            name = self._key_name(thread_id, key)
            await self.client.set(name, f"{run_id} {digest_of(asks)}", ex=LIVE_TTL_S)

    async def _take_over(
        self, thread_id: str, key: str, was: str, run_id: str, asks: str
    ) -> tuple[str, str]:
        """The key's run is ``run_id`` if it still is ``was`` (one of two retries at once
        wins); returns the key's run and its request's digest after."""
        mine = f"{run_id} {digest_of(asks)}"
        name = self._key_name(thread_id, key)
        found = await self.client.eval(TAKE_OVER, 1, name, was, mine, LIVE_TTL_S)
        owner, _, digest = as_text(found).partition(" ")
        return owner, digest

    def _key_name(self, thread_id: str, key: str) -> str:
        digest = hashlib.sha256(json.dumps([thread_id, key]).encode()).hexdigest()
        return f"{self.prefix}:key:{digest}"  # a thread id and a key may both hold ':'
