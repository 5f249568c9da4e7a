"""The bundled demo skills: their folders are valid and their handlers do what they say."""

from __future__ import annotations

import importlib.util
import inspect
import json
import random
import re
import shutil
import struct
import sys
import threading
import wave
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from agents.skills.context import ToolContext
from agents.skills.spec import Frontmatter, SkillConfig

SKILLS = Path(__file__).resolve().parents[2] / "skills"
SKILL_DIRS = sorted(p for p in SKILLS.iterdir() if (p / "SKILL.md").is_file())
_modules: dict[str, ModuleType] = {}


def handler(skill: str, module: str = "handler") -> ModuleType:
    """Import ``skills/<skill>/<module>.py`` by path, once, under a unique module name."""
    name = f"skill_test_{skill.replace('-', '_')}_{module.replace('.', '_')}"
    if name not in _modules:
        path = SKILLS / skill / (module.replace(".", "/") + ".py")
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None
        assert spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        _modules[name] = mod
    return _modules[name]


def ctx(skill: str, tmp_path: Path, key: str = "key-1", tool: str = "tool") -> ToolContext:
    return ToolContext(
        skill=skill,
        tool=tool,
        skill_dir=SKILLS / skill,
        data_dir=tmp_path / skill,
        idempotency_key=key,
        thread_id="thread-1",
        run_id="run-1",
    )


def frontmatter(skill_dir: Path) -> tuple[dict[str, Any], str]:
    text = (skill_dir / "SKILL.md").read_text(encoding="utf-8")
    assert text.startswith("---\n"), f"{skill_dir.name}: SKILL.md must open with ---"
    head, _, body = text[4:].partition("\n---\n")
    return yaml.safe_load(head), body


def config(skill_dir: Path) -> SkillConfig:
    path = skill_dir / "skill.yaml"
    if not path.exists():
        return SkillConfig()
    return SkillConfig.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")) or {})


# --- the folders --------------------------------------------------------------------------


def test_every_bundled_skill_is_here() -> None:
    names = {p.name for p in SKILL_DIRS}
    assert {
        "order-query",
        "inventory",
        "device-alarms",
        "sensor-readings",
        "maintenance-kb",
        "work-order",
        "text-to-speech",
        "returns-policy",
        "escalate-to-human",
    } <= names


@pytest.mark.parametrize("skill_dir", SKILL_DIRS, ids=lambda p: p.name)
def test_frontmatter_parses_and_names_the_folder(skill_dir: Path) -> None:
    raw, body = frontmatter(skill_dir)
    meta = Frontmatter.model_validate(raw)
    assert meta.name == skill_dir.name
    assert len(meta.description) <= 1024
    assert body.strip(), "SKILL.md needs instructions after the frontmatter"


@pytest.mark.parametrize("skill_dir", SKILL_DIRS, ids=lambda p: p.name)
def test_skill_yaml_parses_with_triggers_and_examples(skill_dir: Path) -> None:
    cfg = config(skill_dir)
    assert cfg.triggers, "give the router some trigger keywords"
    assert any(any("\u4e00" <= ch <= "\u9fff" for ch in t) for t in cfg.triggers)
    assert 3 <= len(cfg.examples) <= 6


@pytest.mark.parametrize("skill_dir", SKILL_DIRS, ids=lambda p: p.name)
def test_every_handler_reference_resolves_to_a_function(skill_dir: Path) -> None:
    tools = config(skill_dir).tools
    # A handler.py with no tool naming it is dead code; tools without one cannot run.
    assert bool(tools) == (skill_dir / "handler.py").is_file(), skill_dir.name
    for tool in tools:
        module, _, function = tool.handler.partition(":")
        fn = getattr(handler(skill_dir.name, module), function, None)
        assert callable(fn), f"{skill_dir.name}: {tool.handler} is not a function"
        params = inspect.signature(fn).parameters
        declared = set(tool.parameters.get("properties", {}))
        assert declared <= set(params), f"{tool.name}: {declared - set(params)} not accepted"
        for name in tool.parameters.get("required", []):
            assert name in params
        assert tool.parameters.get("additionalProperties") is False, tool.name


def test_tool_names_are_unique_across_all_skills() -> None:
    seen: dict[str, str] = {}
    for skill_dir in SKILL_DIRS:
        for tool in config(skill_dir).tools:
            assert tool.name not in seen, f"{tool.name} in {seen.get(tool.name)} and {skill_dir}"
            seen[tool.name] = skill_dir.name
    assert len(seen) >= 12


def test_instruction_only_and_pinned_skills() -> None:
    returns = SKILLS / "returns-policy"
    assert not (returns / "handler.py").exists()
    assert config(returns).tools == ()
    assert len(list((returns / "references").glob("*.md"))) >= 3
    assert config(SKILLS / "escalate-to-human").pinned is True
    assert config(SKILLS / "work-order").tools[0].side_effects is True


# --- order-query --------------------------------------------------------------------------


def test_get_order_finds_an_order_and_tolerates_case_and_hyphen(tmp_path: Path) -> None:
    orders = handler("order-query")
    order = orders.get_order(order_id="ord-1028", context=ctx("order-query", tmp_path))
    assert order["order_id"] == "ORD1028"
    assert order["status"] == "shipped"
    assert order["tracking_number"]


def test_get_order_miss_names_the_order(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="ORD9999"):
        handler("order-query").get_order(order_id="ORD9999", context=ctx("order-query", tmp_path))


def test_search_orders_filters_by_product_status_and_dates() -> None:
    orders = handler("order-query")
    data = json.loads((SKILLS / "order-query/assets/orders.json").read_text(encoding="utf-8"))
    assert len(data["orders"]) >= 40
    shipped = orders.search_orders(status="shipped", limit=50)
    assert shipped
    assert all(o["status"] == "shipped" for o in shipped)
    assert len(shipped) == sum(o["status"] == "shipped" for o in data["orders"])
    speakers = orders.search_orders(product="蓝牙音箱", limit=50)
    assert speakers
    assert all("Bluetooth Speaker" in o["items"] for o in speakers)
    assert orders.search_orders(product="bluetooth speaker", limit=50) == speakers
    june = orders.search_orders(date_from="2026-06-01", date_to="2026-06-15", limit=50)
    assert june
    assert all("2026-06-01" <= o["created_at"][:10] <= "2026-06-15" for o in june)
    assert [o["created_at"] for o in june] == sorted((o["created_at"] for o in june), reverse=True)
    assert len(orders.search_orders(limit=3)) == 3


def test_search_orders_rejects_a_reversed_date_range() -> None:
    with pytest.raises(ValueError, match="after"):
        handler("order-query").search_orders(date_from="2026-06-10", date_to="2026-06-01")


# --- inventory ----------------------------------------------------------------------------


def test_get_stock_by_sku_and_by_name() -> None:
    inventory = handler("inventory")
    [monitor] = inventory.get_stock(sku="el-1004")
    by_wh = {w["warehouse_id"]: w for w in monitor["warehouses"]}
    assert by_wh["BJ-01"]["available"] == 0
    assert by_wh["BJ-01"]["low_stock"] is True
    assert monitor["total_available"] == sum(w["available"] for w in monitor["warehouses"])
    bearings = inventory.get_stock(query="spindle bearing")
    assert [b["sku"] for b in bearings] == ["SP-BRG-7014"]
    assert (
        inventory.get_stock(query="轴承", warehouse="PLANT-A")[0]["warehouses"][0]["warehouse_id"]
        == "PLANT-A"
    )


def test_get_stock_misses_name_the_sku_or_query() -> None:
    inventory = handler("inventory")
    with pytest.raises(ValueError, match="XX-0000"):
        inventory.get_stock(sku="XX-0000")
    with pytest.raises(ValueError, match="flux capacitor"):
        inventory.get_stock(query="flux capacitor")


def test_list_low_stock_uses_reorder_points_or_the_threshold() -> None:
    inventory = handler("inventory")
    low = inventory.list_low_stock()
    assert low
    assert all(r["available"] <= r["threshold"] for r in low)
    assert low[0]["available"] == 0  # out of stock comes first
    assert ("EL-1004", "BJ-01") in {(r["sku"], r["warehouse_id"]) for r in low}
    five = inventory.list_low_stock(threshold=5)
    assert five
    assert all(r["available"] <= 5 and r["threshold"] == 5 for r in five)
    assert len(five) < len(low)
    plant = inventory.list_low_stock(warehouse="PLANT-A")
    assert plant
    assert {r["warehouse_id"] for r in plant} == {"PLANT-A"}
    with pytest.raises(ValueError, match="XX-9"):
        inventory.list_low_stock(warehouse="XX-9")


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


# --- text-to-speech -----------------------------------------------------------------------

MIXED = (
    "Spindle temperature is 90.3 °C, above the 90 °C limit! Stop the machine.\n"
    "主轴温度过高，请立即停机检查。冷却系统正常吗？是的；润滑系统也正常。"
    "Check the chiller, the lubrication and the fan; then run the warm-up cycle. "
    + "这是一个没有标点的非常长的中文句子" * 30
    + " and a very long English clause without any stop " * 20
    + "🙂 emoji 🙂 end."
)


@pytest.mark.parametrize("max_bytes", [4, 5, 7, 16, 50, 120, 300, 600])
def test_split_text_respects_the_byte_limit_and_loses_nothing(max_bytes: int) -> None:
    tts = handler("text-to-speech")
    chunks = tts.split_text(MIXED, max_bytes)
    assert "".join(chunks) == MIXED  # order kept, nothing lost or added
    for chunk in chunks:
        encoded = chunk.encode("utf-8")
        assert 0 < len(encoded) <= max_bytes
        assert encoded.decode("utf-8") == chunk  # never half a character
    assert b"".join(c.encode("utf-8") for c in chunks) == MIXED.encode("utf-8")


def test_split_text_random_texts() -> None:
    tts = handler("text-to-speech")
    rng = random.Random(5)
    alphabet = list("ab cd  。！？；，.!?;,\n中文字符é€🙂")
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 300)))
        limit = rng.randint(4, 64)
        chunks = tts.split_text(text, limit)
        assert "".join(chunks) == text
        assert all(0 < len(c.encode("utf-8")) <= limit for c in chunks)


def test_split_text_cuts_at_punctuation_when_it_can() -> None:
    tts = handler("text-to-speech")
    text = "第一句话。第二句话！Third one? Fourth; fifth, sixth.\nSeventh"
    assert tts.split_sentences(text) == [
        "第一句话。",
        "第二句话！",
        "Third one? ",
        "Fourth; ",
        "fifth, ",
        "sixth.\n",
        "Seventh",
    ]
    assert tts.split_sentences("Pi is 3.14, e.g. 1,000 items.") == [
        "Pi is 3.14, ",
        "e.g. ",
        "1,000 items.",
    ]
    chunks = tts.split_text("一二三四五。六七八九十。", 18)  # 15 + 3 bytes per sentence
    assert chunks == ["一二三四五。", "六七八九十。"]
    assert tts.split_text("short. text.", 600) == ["short. text."]
    assert tts.MAX_CHUNK_BYTES == 600


def write_wav(path: Path, frames: int, value: int, rate: int = 22050) -> None:
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(struct.pack("<h", value) * frames)


def test_merge_wav_concatenates_in_order_with_correct_sizes(tmp_path: Path) -> None:
    tts = handler("text-to-speech")
    a, b, out = tmp_path / "a.wav", tmp_path / "b.wav", tmp_path / "out.wav"
    write_wav(a, 1000, 100)
    write_wav(b, 2500, -200)
    info = tts.merge_wav([a, b], out)
    assert info["frames"] == 3500
    assert info["duration_s"] == pytest.approx(3500 / 22050, abs=1e-3)
    raw = out.read_bytes()
    assert raw[:4] == b"RIFF"
    assert raw[8:12] == b"WAVE"
    assert struct.unpack("<I", raw[4:8])[0] == len(raw) - 8
    data_at = raw.index(b"data")
    assert struct.unpack("<I", raw[data_at + 4 : data_at + 8])[0] == 3500 * 2
    assert len(raw) == data_at + 8 + 3500 * 2
    with wave.open(str(out), "rb") as wav:
        assert wav.getnframes() == 3500
        samples = wav.readframes(3500)
    assert samples[:2] == struct.pack("<h", 100)
    assert samples[-2:] == struct.pack("<h", -200)
    assert samples[1998:2002] == struct.pack("<h", 100) + struct.pack("<h", -200)


def test_merge_wav_refuses_mismatched_formats(tmp_path: Path) -> None:
    tts = handler("text-to-speech")
    write_wav(tmp_path / "a.wav", 10, 1, rate=22050)
    write_wav(tmp_path / "b.wav", 10, 1, rate=16000)
    with pytest.raises(ValueError, match=re.escape("b.wav")):
        tts.merge_wav([tmp_path / "a.wav", tmp_path / "b.wav"], tmp_path / "out.wav")


def test_tts_without_espeak_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.setattr(shutil, "which", lambda *_a, **_k: None)
    with pytest.raises(RuntimeError, match="apt-get install espeak-ng"):
        handler("text-to-speech").synthesize_speech(
            text="Hello.", context=ctx("text-to-speech", tmp_path)
        )


def test_tts_guesses_the_voice_from_the_text() -> None:
    tts = handler("text-to-speech")
    assert tts.guess_voice("主轴温度过高，请停机。") == "zh"
    assert tts.guess_voice("Spindle too hot, CNC-001 主轴") == "en"


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")
def test_tts_real_synthesis_of_a_multi_chunk_text(tmp_path: Path) -> None:
    tts = handler("text-to-speech")
    text = "Stop the spindle at the end of the cut. " * 20 + "主轴温度过高。"
    context = ctx("text-to-speech", tmp_path)
    result = tts.synthesize_speech(text=text, voice="en", speed=220, context=context)
    path = Path(result["path"])
    assert path.parent == tmp_path / "text-to-speech" / "tts"
    assert result["chunks"] == len(tts.split_text(text)) >= 2
    assert result["bytes"] == path.stat().st_size
    with wave.open(str(path), "rb") as wav:
        assert wav.getnframes() / wav.getframerate() == pytest.approx(
            result["duration_s"], abs=0.01
        )
    assert result["duration_s"] > 5
    assert tts.synthesize_speech(text=text, voice="en", speed=220, context=context)["cached"]
    with pytest.raises(ValueError, match="no voice"):
        tts.synthesize_speech(text="Hello.", voice="xx-nope", context=context)
