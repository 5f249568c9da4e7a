"""The bundled device-alarms, sensor-readings, maintenance-kb and work-order handlers."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.bundledkit import SKILLS, ctx, handler

# --- device-alarms ------------------------------------------------------------------------


def test_list_alarms_defaults_to_active_sorted_by_severity() -> None:
    alarms = handler("device-alarms")
    active = alarms.list_alarms(limit=100)
    assert active
    assert {a["status"] for a in active} <= {"open", "acknowledged"}
    ranks = [alarms.SEVERITY_RANK[a["severity"]] for a in active]
    assert ranks == sorted(ranks)


def test_list_alarms_filters_by_device_status_and_severity() -> None:
    alarms = handler("device-alarms")
    cnc = alarms.list_alarms(device_id="cnc-001", limit=100)
    assert cnc
    assert {a["device_id"] for a in cnc} == {"CNC-001"}
    assert cnc[0]["severity"] == "critical"
    critical = alarms.list_alarms(severity="critical", status="all", limit=100)
    assert critical
    assert {a["severity"] for a in critical} == {"critical"}
    cleared = alarms.list_alarms(status="cleared", limit=100)
    assert cleared
    assert {a["status"] for a in cleared} == {"cleared"}
    serious = alarms.list_alarms(min_severity="major", limit=100)
    assert {a["severity"] for a in serious} <= {"critical", "major"}
    recent = alarms.list_alarms(status="all", since="2026-06-30T06:00", limit=100)
    assert recent
    assert all(a["raised_at"] >= "2026-06-30T06:00" for a in recent)
    with pytest.raises(ValueError, match="CNC-999"):
        alarms.list_alarms(device_id="CNC-999")


def test_get_alarm_hit_and_miss() -> None:
    alarms = handler("device-alarms")
    alarm = alarms.get_alarm(alarm_id="1022")
    assert alarm["alarm_id"] == "ALM-1022"
    assert alarm["device"]["device_id"] == alarm["device_id"]
    with pytest.raises(ValueError, match="ALM-4242"):
        alarms.get_alarm(alarm_id="ALM-4242")


# --- sensor-readings ----------------------------------------------------------------------


def test_summarize_a_known_series() -> None:
    summarize = handler("sensor-readings").summarize
    stats = summarize([10.0, 12.0, 14.0, 16.0, 18.0], interval_s=900)
    assert (stats["min"], stats["max"], stats["mean"]) == (10.0, 18.0, 14.0)
    assert stats["stdev"] == pytest.approx(3.1623, abs=1e-4)
    assert stats["slope_per_hour"] == pytest.approx(8.0)  # 2 per 15 minutes
    assert stats["trend"] == "rising"
    assert summarize([5.0, 4.0, 3.0, 2.0], 900)["trend"] == "falling"
    noisy = [50.0 + (0.3 if i % 2 else -0.3) for i in range(40)]
    assert summarize(noisy, 900)["trend"] == "stable"
    steps = [8000.0] * 8 + [15000.0] * 8 + [9000.0] * 8 + [14000.0] * 8
    assert summarize(steps, 900)["trend"] == "stable"
    single = summarize([3.0], 900)
    assert single["trend"] == "stable"
    assert single["stdev"] == 0.0


def test_get_readings_returns_the_window_and_its_statistics() -> None:
    sensors = handler("sensor-readings")
    data = json.loads((SKILLS / "sensor-readings/assets/readings.json").read_text("utf-8"))
    values = data["devices"]["CNC-001"]["sensors"]["spindle_bearing_temp"]["values"]
    result = sensors.get_readings(device_id="CNC-001", sensor="spindle_bearing_temp", last_n=24)
    assert [v for _, v in result["points"]] == values[-24:]
    assert result["to"] == "2026-06-30T08:00:00+08:00"
    assert result["stats"]["max"] == max(values[-24:])
    assert result["stats"]["mean"] == pytest.approx(sum(values[-24:]) / 24, abs=1e-3)
    assert result["stats"]["trend"] == "rising"
    assert result["latest_level"] == "alarm"
    pressure = sensors.get_readings(
        device_id="PUMP-07", sensor="outlet_pressure", include_points=False
    )
    assert "points" not in pressure
    assert pressure["stats"]["trend"] == "falling"
    assert pressure["thresholds"]["direction"] == "low"


def test_get_readings_misses_name_the_device_or_sensor() -> None:
    sensors = handler("sensor-readings")
    with pytest.raises(ValueError, match="CNC-404"):
        sensors.get_readings(device_id="CNC-404", sensor="spindle_bearing_temp")
    with pytest.raises(ValueError, match="humidity"):
        sensors.get_readings(device_id="CNC-001", sensor="humidity")


def test_list_sensors_of_one_device_and_of_all() -> None:
    sensors = handler("sensor-readings")
    robot = sensors.list_sensors(device_id="ROBOT-A3")
    assert {s["sensor"] for s in robot} == {"position_error", "motor_temp_j2"}
    assert len(sensors.list_sensors()) > len(robot)


# --- maintenance-kb -----------------------------------------------------------------------


def test_search_kb_ranks_the_spindle_document_first(tmp_path: Path) -> None:
    kb = handler("maintenance-kb")
    hits = kb.search_kb(
        query="spindle overheating", top_k=3, context=ctx("maintenance-kb", tmp_path)
    )
    assert hits[0]["path"] == "references/spindle-overheating.md"
    assert set(hits[0]) == {"path", "document", "section", "snippet", "score"}
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)
    assert kb.search_kb(query="主轴过热")[0]["path"] == "references/spindle-overheating.md"
    assert kb.search_kb(query="hydraulic pressure drop")[0]["path"].endswith(
        "hydraulic-pump-pressure-loss.md"
    )
    assert kb.search_kb(query="recalibrate robot TCP")[0]["path"].endswith(
        "robot-arm-calibration.md"
    )
    assert kb.search_kb(query="zebra giraffe") == []


def test_kb_has_real_documents_and_reads_one(tmp_path: Path) -> None:
    kb = handler("maintenance-kb")
    docs = kb.list_kb_documents()
    assert len(docs) >= 6
    assert all(d["sections"] for d in docs)
    doc = kb.get_kb_document(path="spindle-overheating.md", context=ctx("maintenance-kb", tmp_path))
    assert doc["path"] == "references/spindle-overheating.md"
    assert doc["title"] == "Spindle overheating on machining centres"
    assert kb.get_kb_document(path="references/coolant-system.md")["content"].startswith("# ")


@pytest.mark.parametrize(
    "path",
    [
        "../handler.py",
        "references/../SKILL.md",
        "/etc/passwd",
        "..\\skill.yaml",
        "references/../../order-query/assets/orders.json",
        "C:/Windows/win.ini",
    ],
)
def test_get_kb_document_refuses_paths_outside_references(path: str) -> None:
    with pytest.raises(ValueError, match=r"not a document path|outside"):
        handler("maintenance-kb").get_kb_document(path=path)


def test_get_kb_document_miss_lists_the_documents() -> None:
    with pytest.raises(ValueError, match=re.escape("references/spindle-overheating.md")):
        handler("maintenance-kb").get_kb_document(path="references/nope.md")


# --- work-order ---------------------------------------------------------------------------

WO = {
    "device_id": "CNC-001",
    "title": "Spindle bearing over-temperature",
    "description": "Front bearing 90.3 °C at 07:45 with vibration 4.53 mm/s; inspect bearings.",
    "priority": "high",
    "alarm_id": "ALM-1022",
}


def stored(tmp_path: Path) -> dict[str, Any]:
    return json.loads((tmp_path / "work-order" / "work_orders.json").read_text("utf-8"))


def test_same_idempotency_key_creates_one_work_order(tmp_path: Path) -> None:
    wo = handler("work-order")
    first = wo.create_work_order(**WO, context=ctx("work-order", tmp_path, key="k-1"))
    again = wo.create_work_order(**WO, context=ctx("work-order", tmp_path, key="k-1"))
    assert first["duplicate"] is False
    assert again["duplicate"] is True
    assert again["work_order_id"] == first["work_order_id"]
    assert len(stored(tmp_path)["orders"]) == 1
    assert first["status"] == "open"
    assert first["due_by"] > first["created_at"]


def test_different_keys_create_two_work_orders(tmp_path: Path) -> None:
    wo = handler("work-order")
    a = wo.create_work_order(**WO, context=ctx("work-order", tmp_path, key="k-a"))
    b = wo.create_work_order(**WO, context=ctx("work-order", tmp_path, key="k-b"))
    assert a["work_order_id"] != b["work_order_id"]
    assert len(stored(tmp_path)["orders"]) == 2
    listed = wo.list_work_orders(device_id="cnc-001", context=ctx("work-order", tmp_path))
    assert [o["work_order_id"] for o in listed] == [b["work_order_id"], a["work_order_id"]]
    assert wo.list_work_orders(status="completed", context=ctx("work-order", tmp_path)) == []
    got = wo.get_work_order(
        work_order_id=a["work_order_id"].lower(), context=ctx("work-order", tmp_path)
    )
    assert got["title"] == WO["title"]


def test_a_repeat_with_other_details_keeps_the_original(tmp_path: Path) -> None:
    wo = handler("work-order")
    first = wo.create_work_order(**WO, context=ctx("work-order", tmp_path, key="k-1"))
    changed = {**WO, "priority": "urgent"}
    again = wo.create_work_order(**changed, context=ctx("work-order", tmp_path, key="k-1"))
    assert again["duplicate"] is True
    assert again["priority"] == first["priority"] == "high"
    assert "original" in again["note"]


def test_concurrent_retries_with_one_key_create_one_order(tmp_path: Path) -> None:
    wo = handler("work-order")
    results: list[dict[str, Any]] = []

    def call() -> None:
        results.append(wo.create_work_order(**WO, context=ctx("work-order", tmp_path, key="same")))

    threads = [threading.Thread(target=call) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(stored(tmp_path)["orders"]) == 1
    assert sorted(r["duplicate"] for r in results) == [False] + [True] * 7
    assert not list((tmp_path / "work-order").glob("*.tmp"))


def test_work_order_errors_name_the_device_or_id(tmp_path: Path) -> None:
    wo = handler("work-order")
    with pytest.raises(ValueError, match="MILL-9"):
        wo.create_work_order(**{**WO, "device_id": "MILL-9"}, context=ctx("work-order", tmp_path))
    with pytest.raises(ValueError, match="WO-2026-0999"):
        wo.get_work_order(work_order_id="WO-2026-0999", context=ctx("work-order", tmp_path))
    with pytest.raises(ValueError, match="past"):
        wo.create_work_order(**WO, due_date="2020-01-01", context=ctx("work-order", tmp_path))
