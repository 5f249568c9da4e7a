"""Industrial device alarms, from ``assets/alarms.json``."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agents.skills.context import ToolContext

PLANT_TZ = timezone(timedelta(hours=8))  # the timestamps in the data are plant local time
SEVERITY_RANK = {"critical": 0, "major": 1, "minor": 2, "warning": 3}
ACTIVE = ("open", "acknowledged")
LIST_FIELDS = (
    "alarm_id",
    "device_id",
    "severity",
    "status",
    "code",
    "message",
    "value",
    "threshold",
    "unit",
    "raised_at",
)


def _data(context: ToolContext | None) -> dict[str, Any]:
    skill_dir = context.skill_dir if context else Path(__file__).resolve().parent
    return _load(Path(skill_dir) / "assets" / "alarms.json")


@lru_cache(maxsize=4)
def _load(path: Path) -> dict[str, Any]:
    with path.open(encoding="utf-8") as fh:
        data: dict[str, Any] = json.load(fh)
    return data


def _device(data: dict[str, Any], device_id: str) -> dict[str, Any]:
    wanted = device_id.strip().upper()
    for device in data["devices"]:
        if device["device_id"] == wanted:
            return dict(device)
    known = ", ".join(d["device_id"] for d in data["devices"])
    raise ValueError(f"Unknown device {device_id!r}; known devices are {known}.")


def _parse_since(since: str) -> datetime:
    try:
        moment = datetime.fromisoformat(since.strip())
    except ValueError:
        raise ValueError(
            f"since {since!r} is not an ISO date or date-time (e.g. 2026-06-30 or "
            "2026-06-30T06:00)."
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=PLANT_TZ)


def list_alarms(
    device_id: str | None = None,
    status: str = "active",
    severity: str | None = None,
    min_severity: str | None = None,
    since: str | None = None,
    limit: int = 20,
    context: ToolContext | None = None,
) -> list[dict[str, Any]]:
    """Alarms matching the filters, most severe first, then newest first.

    ``status`` is ``open``, ``acknowledged``, ``cleared``, ``active`` (open or acknowledged,
    the default) or ``all``. ``severity`` keeps one level; ``min_severity`` keeps that level
    and worse. ``since`` is an ISO date or date-time (plant time, UTC+8, when it has no
    offset); only alarms raised at or after it are kept.
    """
    data = _data(context)
    device = _device(data, device_id)["device_id"] if device_id else None
    floor = SEVERITY_RANK[min_severity] if min_severity else None
    after = _parse_since(since) if since else None
    hits = []
    for alarm in data["alarms"]:
        if device and alarm["device_id"] != device:
            continue
        if status == "active" and alarm["status"] not in ACTIVE:
            continue
        if status not in ("active", "all") and alarm["status"] != status:
            continue
        if severity and alarm["severity"] != severity:
            continue
        if floor is not None and SEVERITY_RANK[alarm["severity"]] > floor:
            continue
        if after and datetime.fromisoformat(alarm["raised_at"]) < after:
            continue
        hits.append(alarm)
    hits.sort(key=lambda a: a["raised_at"], reverse=True)
    hits.sort(key=lambda a: SEVERITY_RANK[a["severity"]])
    return [{key: alarm[key] for key in LIST_FIELDS} for alarm in hits[:limit]]


def get_alarm(alarm_id: str, context: ToolContext | None = None) -> dict[str, Any]:
    """One alarm in full, with its device and the acknowledgement/clearing history."""
    data = _data(context)
    wanted = alarm_id.strip().upper()
    if wanted.isdigit():
        wanted = f"ALM-{wanted}"
    for alarm in data["alarms"]:
        if alarm["alarm_id"] == wanted:
            return {**alarm, "device": _device(data, alarm["device_id"])}
    raise ValueError(f"No alarm {wanted}; alarm ids look like ALM-1001.")
