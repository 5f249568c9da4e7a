"""What each user spent on model calls, per UTC day, beside the checkpoints: the per-user
totals the service shows and the daily limit it enforces."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from agents.state.documents import Documents

SPEND = "spend"


def today(now: float | None = None) -> str:
    """The UTC day of ``now`` (``YYYY-MM-DD``)."""
    return time.strftime("%Y-%m-%d", time.gmtime(time.time() if now is None else now))


def seconds_to_midnight(now: float | None = None) -> int:
    """Seconds until the next UTC day starts (when a daily limit resets)."""
    now = time.time() if now is None else now
    return max(1, int(86400 - now % 86400))


class SpendLedger:
    """Cost in millionths of a US dollar, per user and UTC day (one document each).

    Additions in one process are serialised; two processes adding for one user at the same
    moment may lose one addition (read, add, write): the limit is a budget, not an invoice.
    """

    def __init__(self, documents: Documents) -> None:
        self.documents = documents
        self._lock = asyncio.Lock()

    async def add(self, user: str, micro_usd: int, *, now: float | None = None) -> int:
        """Add a run's cost to the user's day; the day's total."""
        day = today(now)
        async with self._lock:
            found = await self.documents.get(SPEND, f"{user}|{day}") or {}
            total = int(found.get("micro_usd", 0)) + int(micro_usd)
            body = {"user": user, "day": day, "micro_usd": total}
            await self.documents.put(SPEND, f"{user}|{day}", body, owner=user)
        return total

    async def spent(self, user: str, *, now: float | None = None) -> int:
        """The user's spend on the current UTC day."""
        found = await self.documents.get(SPEND, f"{user}|{today(now)}")
        return int(found["micro_usd"]) if found else 0

    async def refusal(self, user: str | None, limit: int) -> str | None:
        """Why ``user`` may start no run that calls a model today (they spent ``limit``
        millionths of a dollar, 0 for no limit), or None."""
        if not limit or user is None:
            return None
        spent = await self.spent(user)
        if spent < limit:
            return None
        wait = seconds_to_midnight()
        return (
            f"You have used your daily model budget (${spent / 1e6:.4f} of "
            f"${limit / 1e6:.4f}); it renews at midnight UTC, in {wait // 3600} h "
            f"{wait % 3600 // 60} min."
        )

    async def days(self, user: str, limit: int = 31) -> list[dict[str, Any]]:
        """The user's spend by day, newest first."""
        return await self.documents.find(SPEND, owner=user, limit=limit)
