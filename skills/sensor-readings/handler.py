"""Sensor time series per device, from ``assets/readings.json``, with simple statistics."""

from __future__ import annotations

import json
import statistics
from datetime import datetime, timedelta
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agents.skills.context import ToolContext

# A fitted change counts as a trend when it is at least this share of the mean level...
TREND_MIN_RELATIVE = 0.03
# ...and at least this many times the scatter of the points around the fitted line.
TREND_MIN_NOISE_RATIO = 3.0


def _data(context: ToolContext | None) -> dict[str, Any]:
    skill_dir = context.skill_dir if context else Path(__file__).resolve().parent
    return _load(Path(skill_dir) / "assets" / "readings.json")


@lru_cache(maxsize=4)
def _load(path: Path) -> dict[str, Any]:
    with path.open(encoding="utf-8") as fh:
        data: dict[str, Any] = json.load(fh)
    return data


def _device(data: dict[str, Any], device_id: str) -> tuple[str, dict[str, Any]]:
    wanted = device_id.strip().upper()
    if wanted not in data["devices"]:
        known = ", ".join(data["devices"])
        raise ValueError(f"No readings for device {device_id!r}; devices with sensors: {known}.")
    return wanted, data["devices"][wanted]


def summarize(values: list[float], interval_s: float) -> dict[str, Any]:
    """Min, max, mean, spread and a linear trend of evenly spaced values.

    The trend is the least-squares slope. It is ``rising``/``falling`` when the change it
    predicts over the window is both at least 3 % of the mean and at least three times the
    scatter around the line (so noise and operating steps read as ``stable``).
    """
    if not values:
        raise ValueError("no values to summarise")
    n = len(values)
    mean = statistics.fmean(values)
    if n > 1:
        xs = range(n)
        x_mean = (n - 1) / 2
        sxx = sum((x - x_mean) ** 2 for x in xs)
        slope = sum((x - x_mean) * (y - mean) for x, y in zip(xs, values, strict=True)) / sxx
        residuals = [y - (mean + slope * (x - x_mean)) for x, y in zip(xs, values, strict=True)]
        scatter = statistics.pstdev(residuals)
        stdev = statistics.stdev(values)
    else:
        slope, scatter, stdev = 0.0, 0.0, 0.0
    fitted_change = slope * (n - 1)
    significant = (
        n > 1
        and abs(fitted_change) >= TREND_MIN_RELATIVE * abs(mean)
        and abs(fitted_change) >= TREND_MIN_NOISE_RATIO * scatter
        and fitted_change != 0
    )
    trend = ("rising" if fitted_change > 0 else "falling") if significant else "stable"
    return {
        "count": n,
        "min": min(values),
        "max": max(values),
        "mean": round(mean, 4),
        "stdev": round(stdev, 4),
        "first": values[0],
        "last": values[-1],
        "change": round(values[-1] - values[0], 4),
        "slope_per_hour": round(slope * 3600 / interval_s, 4),
        "trend": trend,
    }


def _level(value: float, thresholds: dict[str, Any] | None) -> str | None:
    if not thresholds:
        return None
    high = thresholds["direction"] == "high"
    for name in ("alarm", "warning"):
        limit = thresholds[name]
        if (value >= limit) if high else (value <= limit):
            return name
    return "normal"


def _hours_to_alarm(stats: dict[str, Any], thresholds: dict[str, Any] | None) -> float | None:
    if not thresholds or stats["trend"] == "stable":
        return None
    gap = thresholds["alarm"] - stats["last"]
    slope = stats["slope_per_hour"]
    high = thresholds["direction"] == "high"
    toward = (gap > 0 and slope > 0) if high else (gap < 0 and slope < 0)
    return round(gap / slope, 1) if toward else None


def get_readings(
    device_id: str,
    sensor: str,
    last_n: int = 24,
    include_points: bool = True,
    context: ToolContext | None = None,
) -> dict[str, Any]:
    """The last ``last_n`` readings of one sensor, with statistics and threshold status."""
    data = _data(context)
    device, info = _device(data, device_id)
    key = sensor.strip().lower()
    if key not in info["sensors"]:
        known = ", ".join(info["sensors"])
        raise ValueError(f"{device} has no sensor {sensor!r}; its sensors are {known}.")
    series = info["sensors"][key]
    values = series["values"]
    interval = data["interval_s"]
    start = datetime.fromisoformat(data["start"])
    first_index = max(0, len(values) - last_n)
    window = values[first_index:]
    stamps = [
        (start + timedelta(seconds=interval * i)).isoformat()
        for i in range(first_index, len(values))
    ]
    stats = summarize(window, interval)
    thresholds = series.get("thresholds")
    result: dict[str, Any] = {
        "device_id": device,
        "sensor": key,
        "unit": series["unit"],
        "description": series["description"],
        "interval_s": interval,
        "from": stamps[0],
        "to": stamps[-1],
        "stats": stats,
        "thresholds": thresholds,
        "latest_level": _level(window[-1], thresholds),
        "hours_to_alarm_at_this_rate": _hours_to_alarm(stats, thresholds),
    }
    if include_points:
        result["points"] = [[t, v] for t, v in zip(stamps, window, strict=True)]
    return result


def list_sensors(
    device_id: str | None = None, context: ToolContext | None = None
) -> list[dict[str, Any]]:
    """The sensors of one device (or of every device) with unit, thresholds and latest value."""
    data = _data(context)
    devices = [_device(data, device_id)] if device_id else list(data["devices"].items())
    end = datetime.fromisoformat(data["start"]) + timedelta(
        seconds=data["interval_s"] * (data["points"] - 1)
    )
    out = []
    for device, info in devices:
        for name, series in info["sensors"].items():
            latest = series["values"][-1]
            out.append(
                {
                    "device_id": device,
                    "device_name": info["name"],
                    "sensor": name,
                    "unit": series["unit"],
                    "description": series["description"],
                    "points": len(series["values"]),
                    "latest_value": latest,
                    "latest_at": end.isoformat(),
                    "latest_level": _level(latest, series.get("thresholds")),
                    "thresholds": series.get("thresholds"),
                }
            )
    return out
