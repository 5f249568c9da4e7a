"""Maintenance work orders, stored in the skill's data folder, created at most once per key.

The store is one JSON file, ``work_orders.json`` in ``context.data_dir``. Every change holds
a thread lock and an exclusive file lock (so two threads or two service processes sharing the
folder cannot both create), and is written to a temporary file then moved over the old one
with ``os.replace`` (so a crash never leaves half a file).
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date, datetime, timedelta, timezone
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agents.skills.context import ToolContext

STORE = "work_orders.json"
STORE_VERSION = 1
PRIORITIES = ("low", "medium", "high", "urgent")
STATUSES = ("open", "in_progress", "on_hold", "completed", "cancelled")
# How long each priority may wait before work starts, when no due date is given.
RESPONSE_TIME = {
    "urgent": timedelta(hours=4),
    "high": timedelta(hours=24),
    "medium": timedelta(days=3),
    "low": timedelta(days=7),
}
PLANT_TZ = timezone(timedelta(hours=8))
_FIELDS_COMPARED = ("device_id", "title", "description", "priority", "alarm_id")

_thread_lock = threading.Lock()


@contextmanager
def _locked(data_dir: Path) -> Iterator[None]:
    """Hold the process-wide thread lock and an exclusive lock on ``.work_orders.lock``."""
    data_dir.mkdir(parents=True, exist_ok=True)
    with _thread_lock, (data_dir / ".work_orders.lock").open("a+") as fh:
        try:
            import fcntl
        except ImportError:  # not POSIX: the thread lock alone guards this process
            yield
            return
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _read(data_dir: Path) -> dict[str, Any]:
    path = data_dir / STORE
    if not path.exists():
        return {"version": STORE_VERSION, "last_number": 0, "orders": [], "keys": {}}
    with path.open(encoding="utf-8") as fh:
        data: dict[str, Any] = json.load(fh)
    return data


def _write(data_dir: Path, store: dict[str, Any]) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".work_orders.", suffix=".tmp", dir=data_dir)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(store, fh, ensure_ascii=False, indent=1)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, data_dir / STORE)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@lru_cache(maxsize=4)
def _devices(path: Path) -> dict[str, dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        return {d["device_id"]: d for d in json.load(fh)["devices"]}


def _device(context: ToolContext, device_id: str) -> dict[str, Any]:
    devices = _devices(Path(context.skill_dir) / "assets" / "devices.json")
    wanted = device_id.strip().upper()
    if wanted not in devices:
        raise ValueError(
            f"Unknown device {device_id!r}; work orders can be opened for {', '.join(devices)}."
        )
    return devices[wanted]


def _now() -> datetime:
    return datetime.now(PLANT_TZ).replace(microsecond=0)


def create_work_order(
    device_id: str,
    title: str,
    description: str,
    priority: str,
    *,
    context: ToolContext,
    alarm_id: str | None = None,
    assignee: str | None = None,
    requested_by: str | None = None,
    due_date: str | None = None,
) -> dict[str, Any]:
    """Open a maintenance work order, once per idempotency key.

    A second call with the key of an earlier one (a retry, a resumed run) creates nothing
    and returns the order created the first time, with ``duplicate: true``.
    """
    key = context.idempotency_key
    if not key:
        raise ValueError("create_work_order needs an idempotency key; refusing to create.")
    device = _device(context, device_id)
    due: str | None = None
    if due_date:
        try:
            parsed = date.fromisoformat(due_date)
        except ValueError:
            raise ValueError(
                f"due_date {due_date!r} is not a date in the form YYYY-MM-DD."
            ) from None
        if parsed < _now().date():
            raise ValueError(f"due_date {due_date} is in the past.")
        due = parsed.isoformat()
    data_dir = Path(context.data_dir)
    request = {
        "device_id": device["device_id"],
        "title": title.strip(),
        "description": description.strip(),
        "priority": priority,
        "alarm_id": alarm_id.strip().upper() if alarm_id else None,
    }
    with _locked(data_dir):
        store = _read(data_dir)
        existing_id = store["keys"].get(key)
        if existing_id is not None:
            order = next(o for o in store["orders"] if o["work_order_id"] == existing_id)
            result = {**order, "duplicate": True}
            if any(order.get(f) != request[f] for f in _FIELDS_COMPARED):
                result["note"] = (
                    "This call was a repeat of an earlier one (same idempotency key) with "
                    "different details; the original work order was kept unchanged."
                )
            return result
        created = _now()
        number = store["last_number"] + 1
        order = {
            "work_order_id": f"WO-{created.year}-{number:04d}",
            **request,
            "device_name": device["name"],
            "location": device.get("location"),
            "status": "open",
            "assignee": assignee.strip() if assignee else None,
            "requested_by": requested_by.strip() if requested_by else None,
            "created_at": created.isoformat(),
            "due_by": due or (created + RESPONSE_TIME[priority]).isoformat(),
            "thread_id": context.thread_id,
            "run_id": context.run_id,
        }
        store["last_number"] = number
        store["orders"].append(order)
        store["keys"][key] = order["work_order_id"]
        _write(data_dir, store)
    return {**order, "duplicate": False}


def get_work_order(work_order_id: str, *, context: ToolContext) -> dict[str, Any]:
    """One work order by id."""
    wanted = work_order_id.strip().upper()
    data_dir = Path(context.data_dir)
    with _locked(data_dir):
        store = _read(data_dir)
    for order in store["orders"]:
        if order["work_order_id"] == wanted:
            return dict(order)
    raise ValueError(f"No work order {wanted}; ids look like WO-2026-0001.")


def list_work_orders(
    device_id: str | None = None,
    status: str | None = None,
    priority: str | None = None,
    limit: int = 20,
    *,
    context: ToolContext,
) -> list[dict[str, Any]]:
    """Work orders matching the filters, newest first."""
    device = _device(context, device_id)["device_id"] if device_id else None
    data_dir = Path(context.data_dir)
    with _locked(data_dir):
        store = _read(data_dir)
    hits = [
        order
        for order in store["orders"]
        if (device is None or order["device_id"] == device)
        and (status is None or order["status"] == status)
        and (priority is None or order["priority"] == priority)
    ]
    hits.sort(key=lambda o: (o["created_at"], o["work_order_id"]), reverse=True)
    return hits[:limit]
