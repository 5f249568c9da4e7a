"""The runs one process knows (``KeptRuns``): those under way, per thread; every run by its
id, an ended one for its retention; and ended runs by what a client's retry brings (its
Idempotency-Key, or the message a run resumed after a crash answered), so the retry joins the
run instead of starting another."""

from __future__ import annotations

import time
from typing import TypeVar

from agents.feed import RunFeed, asked_of

RETAIN_S = 600.0  # how long a run stays joinable by its idempotency key after it ends
RESUMED = "resumed:"  # ended resumed runs, by the fingerprint of the message they answered
PRUNE_S = 1.0  # how often runs past their retention are forgotten
PACK_AFTER_S = 30.0  # an ended run's events packed (``RunFeed.pack``) once read, as a rule
K = TypeVar("K")  # what kept runs are found by


class KeptRuns:
    """The runs of ``Conversations``.

    Args:
        retain_s: How long an ended run stays readable by its id (its status and events).
    """

    def __init__(self, retain_s: float) -> None:
        self.retain_s = retain_s
        self.by_id: dict[str, RunFeed] = {}  # every run, ended ones for retain_s
        self.under_way: dict[str, list[RunFeed]] = {}  # per thread
        self.recent: dict[tuple[str, str], RunFeed] = {}  # ended runs, by what a retry brings
        self._pruned = 0.0  # when runs past their retention were last forgotten

    def add(self, feed: RunFeed) -> None:
        """A run starts (queued for its thread)."""
        self.under_way.setdefault(feed.thread_id, []).append(feed)
        self.keep(feed)

    def forget_thread(self, thread_id: str) -> None:
        """Forget the ended runs of a deleted thread: their answers and events go with it
        (another thread of its id may be made: they must not be found through it)."""
        gone = {r for r, f in self.by_id.items() if f.thread_id == thread_id and f.done}
        self.by_id = {r: f for r, f in self.by_id.items() if r not in gone}
        self.recent = {k: f for k, f in self.recent.items() if f.run_id not in gone}

    def get(self, run_id: str) -> RunFeed | None:
        """A run under way, or one that ended less than ``retain_s`` ago, by its id."""
        self.keep(None)
        feed = self.by_id.get(run_id)
        return None if feed is None or _expired(feed, self.retain_s) else feed

    def busy(self, thread_id: str) -> bool:
        """Whether a run of the thread is under way here."""
        return bool(self.under_way.get(thread_id))

    def keep(self, feed: RunFeed | None) -> None:
        """Remember ``feed`` by its run id; forget runs that ended over ``retain_s`` ago (and
        keyed ones over ``RETAIN_S``) at most once every ``PRUNE_S``: a walk over every run
        kept, which at 50 turns a second holds 30,000 of them."""
        now = time.monotonic()
        if now - self._pruned >= PRUNE_S:
            self._pruned = now
            self.by_id = _still_kept(self.by_id, self.retain_s)
            self.recent = _still_kept(self.recent, RETAIN_S)
        if feed is not None:
            self.by_id[feed.run_id] = feed

    def joinable(self, thread_id: str, wanted: str, key: str | None) -> RunFeed | None:
        """A run of the thread that a request for ``wanted`` (with ``key``) should join: one
        under way for the same message, or one that ended lately for the same key."""
        for feed in self.under_way.get(thread_id, []):
            if feed.matches(wanted, key):
                return feed
        if key is not None:
            ended = self.recent.get((thread_id, key))
        elif wanted:
            # A run resumed after a crash answered a message its client never got the answer
            # of: the client resending it gets that answer, not a second turn.
            ended = self.recent.get((thread_id, RESUMED + asked_of(wanted)))
        else:
            return None
        return None if ended is None or _expired(ended, RETAIN_S) else ended

    def forget(self, feed: RunFeed, joinable: bool = True) -> None:
        """Run ``feed`` ended: no longer under way; ``joinable``, a retry joins it for a while
        (by its key, or by its message when it was resumed)."""
        thread_id = feed.thread_id
        feeds = self.under_way.get(thread_id, [])
        if feed in feeds:
            feeds.remove(feed)
        if not feeds:
            self.under_way.pop(thread_id, None)
        if not joinable:
            return
        if feed.key is not None:  # a retry with the key gets this run's events for a while
            self.recent[(thread_id, feed.key)] = feed
        if feed.resumed and feed.fingerprint:  # a client resending the message it lost
            self.recent[(thread_id, RESUMED + feed.fingerprint)] = feed


def _still_kept(runs: dict[K, RunFeed], retain_s: float) -> dict[K, RunFeed]:
    """``runs`` but those that ended over ``retain_s`` ago; those that ended over
    ``PACK_AFTER_S`` ago are packed for the rest of their retention (``RunFeed.pack``)."""
    kept = {k: f for k, f in runs.items() if not _expired(f, retain_s)}
    now = time.monotonic()
    for feed in kept.values():
        if feed.done and now - feed.ended_at >= PACK_AFTER_S:
            feed.pack()
    return kept


def _expired(feed: RunFeed, retain_s: float) -> bool:
    """Whether a run ended over ``retain_s`` ago."""
    return feed.done and time.monotonic() - feed.ended_at >= retain_s
