"""The call journal: side-effecting calls recorded before they run, beside the checkpoints.

A side effect must happen once, crash or not. Before a side-effecting tool (or, next, a
workflow node) runs, its idempotency key is recorded durably; a resumed or retried run that
makes the same call finds the record: a finished call's result is reused without running the
handler again, and a call that failed or was cut off (the process died mid-call) runs again
with the same key, so the handler can tell the repeat and refuse it. A record names what was
asked (``request``: the tool and its arguments' hash), so a key sent again with another
request is told apart from a retry.

Each claim has an owner token, and a call's beats and end are written only under the claim
that stands: a caller whose call was taken over (it went silent, its beats lost) writes
nothing over the claim that took it. Times are the journal's own clock (the database's), so
hosts whose clocks disagree agree on which call is silent.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal, Protocol

CallStatus = Literal["started", "done", "failed"]


@dataclass(frozen=True)
class CallRecord:
    """A recorded call: ``content`` and ``ok`` once it finished; what it asked (``request``,
    None in a record from before requests were kept), when it started and when it was last
    heard of (Unix times, by the journal's clock), and the claim that makes or made it
    (``owner``, None in a record from before claims had owners)."""

    key: str
    status: CallStatus
    content: str | None = None
    ok: bool | None = None
    request: str | None = None
    created: float = 0.0
    updated: float = 0.0  # its last sign of life: a call under way beats every few seconds
    owner: str | None = None


@dataclass(frozen=True)
class Claim:
    """A caller's claim on a call: it makes the call, and writes its beats and its end with
    ``owner``; once another caller has taken the call over, those write nothing."""

    key: str
    owner: str


class CallJournal(Protocol):
    """Where side-effecting calls are recorded (one table in the checkpoint database)."""

    async def begin(
        self,
        key: str,
        *,
        thread_id: str | None,
        run_id: str | None,
        tool: str,
        request: str | None = None,
        silent_s: float | None = None,
    ) -> Claim | CallRecord:
        """Claim the call: a ``Claim`` when the caller is to make it (the key is new, or its
        call failed, or was cut off: started and not heard of for ``silent_s`` seconds by
        the journal's clock; None: never), recorded as started under a new owner; else the
        record that stands (a call done, or one under way elsewhere, or one that asked
        another ``request``; None: any). One claimant wins, whatever the processes."""
        ...

    async def get(self, key: str) -> CallRecord | None:
        """The key's record, if it has one."""
        ...

    async def touch(self, claim: Claim) -> bool:
        """A call under way is alive (its record's ``updated`` is now). False when the
        claim no longer stands (the call was taken over, or ended): nothing is written."""
        ...

    async def finish(self, claim: Claim, content: str, ok: bool) -> bool:
        """Record the call's result. False when the claim no longer stands (another caller
        took the call over): its record is left as that one wrote it."""
        ...

    async def fail(self, claim: Claim, content: str | None = None) -> bool:
        """Record that the call failed, and what it answered (the calls that waited for it
        get that answer; a later retry runs it again, at once). False, writing nothing,
        when the claim no longer stands."""
        ...

    async def forget(self, keys: Sequence[str]) -> None:
        """Delete the records of ``keys`` (those a finished turn no longer needs)."""
        ...


class MemoryCallJournal:
    """A journal in memory: for graphs run without a store (tests, the bench)."""

    def __init__(self) -> None:
        self.records: dict[str, CallRecord] = {}

    async def begin(
        self,
        key: str,
        *,
        thread_id: str | None,
        run_id: str | None,
        tool: str,
        request: str | None = None,
        silent_s: float | None = None,
    ) -> Claim | CallRecord:
        """See ``CallJournal.begin``."""
        earlier = self.records.get(key)
        now = time.time()
        if earlier is not None and not _claimable(earlier, request, silent_s, now):
            return earlier
        claim = Claim(key, uuid.uuid4().hex)
        asked = request if earlier is None else earlier.request
        self.records[key] = CallRecord(key, "started", None, None, asked, now, now, claim.owner)
        return claim

    async def get(self, key: str) -> CallRecord | None:
        """See ``CallJournal.get``."""
        return self.records.get(key)

    async def touch(self, claim: Claim) -> bool:
        """See ``CallJournal.touch``."""
        earlier = self._held(claim)
        if earlier is None or earlier.status != "started":
            return False
        self.records[claim.key] = replace(earlier, updated=time.time())
        return True

    async def finish(self, claim: Claim, content: str, ok: bool) -> bool:
        """See ``CallJournal.finish``."""
        return self._end(claim, "done", content, ok)

    async def fail(self, claim: Claim, content: str | None = None) -> bool:
        """See ``CallJournal.fail``."""
        return self._end(claim, "failed", content, False)

    async def forget(self, keys: Sequence[str]) -> None:
        """See ``CallJournal.forget``."""
        for key in keys:
            self.records.pop(key, None)

    def _held(self, claim: Claim) -> CallRecord | None:
        """The claim's record, while the claim stands."""
        record = self.records.get(claim.key)
        return record if record is not None and record.owner == claim.owner else None

    def _end(self, claim: Claim, status: CallStatus, content: str | None, ok: bool) -> bool:
        earlier = self._held(claim)
        if earlier is None:
            return False
        self.records[claim.key] = replace(
            earlier, status=status, content=content, ok=ok, updated=time.time()
        )
        return True


def _claimable(record: CallRecord, request: str | None, silent_s: float | None, now: float) -> bool:
    """Whether a call may take over ``record``: it asks the same (or one of them does not
    say), and the record's call failed, or started and was not heard of for ``silent_s``."""
    if request is not None and record.request not in (None, request):
        return False
    if record.status == "failed":
        return True
    return record.status == "started" and silent_s is not None and record.updated < now - silent_s
