"""What a worker's handlers print, relayed to the service's log (``relay_output``): each
line attributed to the skill and to the call under way when it was printed, read from the
marks the worker writes around each call (``worker.mark_output``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

import structlog

from agents.skills.worker import OUTPUT_MARK

log = structlog.get_logger(__name__)
# What a worker's handlers print goes to the service's log, attributed to the skill, within
# bounds: a line is cut at _LINE_CHARS, and past a burst of _BURST lines, _PER_S lines a
# second are logged; the rest is read (the handler never blocks on a full pipe) and counted.
_LINE_CHARS = 1000
_BURST = 50
_PER_S = 10.0


async def relay_output(
    stream: asyncio.StreamReader,
    skill: str,
    pid: int | None = None,
    calls: dict[int, Mapping[str, Any]] | None = None,
) -> None:
    """Log the lines a worker writes to its stderr (``print`` included) until it ends.

    Each line is logged with the ids of the call under way in the worker when it was printed
    (``calls``: the log context of each call by number, the worker's marks in the output
    saying where each starts and ends), and with none between calls; never with the context
    of whatever runs this (start it in a context of its own: a worker outlives the request
    that started it)."""
    allowance, last = float(_BURST), time.monotonic()
    dropped = dropped_bytes = 0
    told = 0.0  # when dropped lines were last counted in the log (once a second at most)
    pending = b""
    ids: Mapping[str, Any] = {}  # the call under way's
    calls = {} if calls is None else calls
    worker = {"skill": skill, "pid": pid}

    def output(line: str) -> None:
        log.info("skill.output", **{**_plain(ids), **worker, "line": line[:_LINE_CHARS]})

    while True:
        if dropped:  # told after a quiet second at the latest, not at the next output
            try:
                chunk = await asyncio.wait_for(stream.read(65536), 1.0)
            except TimeoutError:
                log.warning("skill.output_dropped", **worker, lines=dropped, bytes=dropped_bytes)
                dropped = dropped_bytes = 0
                told = time.monotonic()
                continue
        else:
            chunk = await stream.read(65536)
        if not chunk:
            break
        lines = (pending + chunk).split(b"\n")
        pending = lines.pop()[: _LINE_CHARS * 4]  # an unended line: its start is enough
        now = time.monotonic()
        allowance, last = min(float(_BURST), allowance + (now - last) * _PER_S), now
        for line in lines:
            if line.startswith(OUTPUT_MARK):  # a call starts or ends (``worker.mark_output``)
                what, _, digits = line[len(OUTPUT_MARK) :].partition(b" ")
                number = int(digits) if digits.isdigit() else 0
                ids = calls.get(number, {}) if what == b"start" else {}
                if what == b"end":
                    calls.pop(number, None)
                continue
            if not line.strip():
                continue
            if allowance < 1:
                dropped, dropped_bytes = dropped + 1, dropped_bytes + len(line) + 1
                continue
            allowance -= 1
            output(line.decode("utf-8", "replace").rstrip())
        if dropped and now - told >= 1:
            log.warning("skill.output_dropped", **worker, lines=dropped, bytes=dropped_bytes)
            dropped = dropped_bytes = 0
            told = now
    if pending.strip():
        output(pending.decode("utf-8", "replace"))
    if dropped:
        log.warning("skill.output_dropped", **worker, lines=dropped, bytes=dropped_bytes)


def _plain(ids: Mapping[str, Any]) -> dict[str, Any]:
    """A call's log context, without the keys a log call takes itself."""
    return {k: v for k, v in ids.items() if k != "event"}
