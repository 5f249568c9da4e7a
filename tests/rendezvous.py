"""A meeting point for fixture handlers that a test must see running at the same time."""

from __future__ import annotations

import threading

_lock = threading.Lock()
_barriers: dict[str, threading.Barrier] = {}


def meet(key: str, parties: int = 2, timeout: float = 5.0) -> bool:
    """Wait until ``parties`` callers of ``key`` are here at once, at most ``timeout`` seconds.

    Returns:
        True when they met (the calls overlapped), False when the wait timed out (they ran
        one after the other).
    """
    with _lock:
        barrier = _barriers.get(key)
        if barrier is None or barrier.broken:
            barrier = _barriers[key] = threading.Barrier(parties)
    try:
        barrier.wait(timeout)
    except threading.BrokenBarrierError:
        return False
    return True
