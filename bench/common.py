"""Shared pieces of the benchmarks: data files, synthetic skills, timing."""

from __future__ import annotations

import json
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import agents  # noqa: F401  (sets the offline environment before anything else imports)
from agents.skills.index import SkillEntry

DATA = Path(__file__).resolve().parent / "data"
ROOT = Path(__file__).resolve().parent.parent

DOMAINS = {
    "orders": ["order", "purchase", "delivery", "parcel", "checkout", "basket"],
    "billing": ["invoice", "payment", "refund", "charge", "receipt", "subscription"],
    "devices": ["alarm", "sensor", "pump", "spindle", "robot", "conveyor"],
    "maintenance": ["repair", "inspection", "lubrication", "calibration", "spare part", "wear"],
    "hr": ["leave", "payslip", "holiday", "onboarding", "benefits", "overtime"],
    "it": ["password", "vpn", "laptop", "printer", "email account", "license"],
    "travel": ["flight", "hotel", "visa", "itinerary", "expense", "booking"],
    "facilities": ["meeting room", "parking", "badge", "cleaning", "heating", "desk"],
    "logistics": ["shipment", "warehouse", "pallet", "freight", "customs", "carrier"],
    "finance": ["budget", "forecast", "exchange rate", "ledger", "audit", "tax"],
}
ACTIONS = [
    "look up",
    "create",
    "cancel",
    "update",
    "list",
    "summarise",
    "check",
    "explain",
    "schedule",
    "report on",
    "escalate",
    "export",
]


def load_jsonl(name: str) -> list[dict[str, Any]]:
    """Rows of ``bench/data/<name>``."""
    lines = (DATA / name).read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def synthetic_entries(n: int, seed: int = 7) -> list[SkillEntry]:
    """``n`` plausible, distinct skill summaries over ten domains."""
    rng = random.Random(seed)
    names = list(DOMAINS)
    entries = []
    for i in range(n):
        domain = names[i % len(names)]
        words = rng.sample(DOMAINS[domain], 2)
        action = ACTIONS[(i // len(names)) % len(ACTIONS)]
        name = f"{domain}-{action.replace(' ', '-')}-{words[0].replace(' ', '-')}-{i}"
        description = (
            f"{action.capitalize()} {words[0]} records and related {words[1]} "
            f"details for the {domain} team (variant {i}). Use when a user asks to "
            f"{action} a {words[0]}."
        )
        entries.append(
            SkillEntry(
                name, description, (words[0], words[1]), (f"can you {action} my {words[0]} please",)
            )
        )
    return entries


def synthetic_definition(entry: SkillEntry) -> str:
    """A realistic full definition (SKILL.md body plus one tool schema) for the baseline."""
    tool = {
        "type": "function",
        "function": {
            "name": entry.name.replace("-", "_")[:60],
            "description": entry.description,
            "parameters": {
                "type": "object",
                "additionalProperties": False,
                "required": ["id"],
                "properties": {
                    "id": {"type": "string", "description": "Record id."},
                    "limit": {"type": "integer", "minimum": 1},
                },
            },
        },
    }
    body = (
        f"# {entry.name}\n{entry.description}\n\n1. Ask for the record id if missing.\n"
        "2. Call the tool and present the result as a short list.\n"
        "3. Never invent values; say when a record does not exist.\n"
        "4. For changes, confirm with the user before calling the tool.\n"
    )
    return body + json.dumps(tool)


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0–100) by nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def timed(fn: Callable[[], Any], repeat: int) -> list[float]:
    """Milliseconds of ``repeat`` calls."""
    out = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        out.append((time.perf_counter() - started) * 1000)
    return out


def summary_ms(values: list[float]) -> str:
    """p50 / p99 / mean of a latency sample."""
    return (
        f"p50 {percentile(values, 50):.2f} ms, p99 {percentile(values, 99):.2f} ms, "
        f"mean {statistics.fmean(values):.2f} ms"
    )
