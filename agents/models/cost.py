"""What a model call costs, in millionths of a US dollar (whole numbers add up exactly).

Prices per million tokens come from the profile (``price``, for local and private models),
else from litellm's price map: the JSON file litellm ships, read here without importing
litellm, so nothing is fetched over the network and the direct path does not pay litellm's
import time. A model the map does not know has no cost (rather than a cost of nothing).
"""

from __future__ import annotations

import functools
import importlib.util
import json
from pathlib import Path

from agents.models.config import ModelProfile, Price

_MAP_FILE = "model_prices_and_context_window_backup.json"


@functools.cache
def price_map() -> dict[str, tuple[float, float]]:
    """litellm's local price map as USD per token, input and output, by model name (only
    the prices are kept: the whole map is megabytes of objects). Empty when litellm is not
    installed."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return {}
    path = Path(next(iter(spec.submodule_search_locations))) / _MAP_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {
        name: (float(entry["input_cost_per_token"]), float(entry.get("output_cost_per_token") or 0))
        for name, entry in (data.items() if isinstance(data, dict) else ())
        if isinstance(entry, dict) and isinstance(entry.get("input_cost_per_token"), int | float)
    }


def price_of(profile: ModelProfile, reported: str | None = None) -> Price | None:
    """The profile's own prices, else the price map's for its model (or for the model the
    provider reported answering with), else ``None``."""
    if profile.price is not None:
        return profile.price
    for name in (*_names(profile), *([reported] if reported else [])):
        if name in price_map():
            per_token_in, per_token_out = price_map()[name]
            return Price(input=per_token_in * 1e6, output=per_token_out * 1e6)
    return None


def _names(profile: ModelProfile) -> tuple[str, ...]:
    """How the price map may write the profile's model: with its provider, and without."""
    if profile.provider == "langchain":
        provider, _, name = profile.model.rpartition(":")
        return (f"{provider}/{name}", name) if provider else (name,)
    full = profile.litellm_model
    return (full, full.split("/", 1)[-1])


def micro_usd(price: Price, input_tokens: int, output_tokens: int) -> int:
    """The cost of one call in millionths of a dollar: tokens times dollars per million
    tokens is exactly that."""
    return round(input_tokens * price.input + output_tokens * price.output)
