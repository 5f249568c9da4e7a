"""What every service process must see of the others, through Redis: run events, run status,
cancels, reloads and runs handed over.

The process running a run appends each of its events to a Redis Stream of the run's own, with
the event's sequence number as the entry id (``0-<seq>``), so a reader reconnecting with
``Last-Event-ID: n`` reads from ``0-n`` on (``XREAD BLOCK``); the run's status sits in a key
beside it. Both are written in batches off the run's path (a run waits for Redis only once, as
it begins: ``RunBus.begin``) and expire ``retain_s`` after the run ends (``LIVE_TTL_S`` while
it runs: a killed process's keys go too); the stream keeps at most ``STREAM_MAXLEN`` events. A
process says it is alive in a key of its own, renewed while it lives and expiring ``alive_s``
(the run lease's time) after it dies; the status of a run still queued (never begun) whose
process is gone is ended, by the first process that reads it, as failed: its message was never
kept. A process that was only out of Redis's reach for that long may still hold the run: it
begins a queued run only if its status still says queued, and the other ends it only if it
still says queued with the alive key still absent, each in one script, so exactly one of the
two happens (such an end is kept ``LIVE_TTL_S``, as long as the run could still wait there). A
pub/sub channel carries what every process must hear: cancel a run wherever it runs, reload
skills and workflows, resume the runs a stopping process handed over. Without Redis none of
this exists: one process keeps its runs' events in memory (``RunFeed``).
"""

from agents.bus.common import (
    ENDS,
    LIVE_TTL_S,
    NEVER_BEGAN,
    POLL_S,
    STREAM_MAXLEN,
    SharedEvent,
    reconnect_data,
)
from agents.bus.connection import (
    REDIS_CONNECTIONS,
    REDIS_WAIT_S,
    check_redis,
    redact,
    redis_client,
)
from agents.bus.runs import BEGIN_WAIT_S, RunBus

__all__ = [
    "BEGIN_WAIT_S",
    "ENDS",
    "LIVE_TTL_S",
    "NEVER_BEGAN",
    "POLL_S",
    "REDIS_CONNECTIONS",
    "REDIS_WAIT_S",
    "STREAM_MAXLEN",
    "RunBus",
    "SharedEvent",
    "check_redis",
    "reconnect_data",
    "redact",
    "redis_client",
]
