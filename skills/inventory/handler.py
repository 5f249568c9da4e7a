"""Stock levels per SKU and warehouse, from ``assets/stock.json``."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agents.skills.context import ToolContext


def _data(context: ToolContext | None) -> dict[str, Any]:
    skill_dir = context.skill_dir if context else Path(__file__).resolve().parent
    return _load(Path(skill_dir) / "assets" / "stock.json")


@lru_cache(maxsize=4)
def _load(path: Path) -> dict[str, Any]:
    with path.open(encoding="utf-8") as fh:
        data: dict[str, Any] = json.load(fh)
    return data


def _check_warehouse(data: dict[str, Any], warehouse: str | None) -> str | None:
    if warehouse is None:
        return None
    wanted = warehouse.strip().upper()
    known = [w["warehouse_id"] for w in data["warehouses"]]
    if wanted not in known:
        raise ValueError(f"Unknown warehouse {warehouse!r}; warehouses are {', '.join(known)}.")
    return wanted


def _record(item: dict[str, Any], warehouse: str | None) -> dict[str, Any]:
    rows = []
    for row in item["stock"]:
        if warehouse and row["warehouse_id"] != warehouse:
            continue
        available = row["on_hand"] - row["reserved"]
        rows.append(
            {
                "warehouse_id": row["warehouse_id"],
                "on_hand": row["on_hand"],
                "reserved": row["reserved"],
                "available": available,
                "low_stock": available <= item["reorder_point"],
            }
        )
    return {
        "sku": item["sku"],
        "name": item["name"],
        "name_zh": item["name_zh"],
        "category": item["category"],
        "unit": item["unit"],
        "reorder_point": item["reorder_point"],
        "total_available": sum(r["available"] for r in rows),
        "warehouses": rows,
    }


def _matches(item: dict[str, Any], query: str) -> bool:
    haystack = " ".join((item["sku"], item["name"], item["name_zh"], item["category"])).casefold()
    return all(token in haystack for token in query.casefold().split())


def get_stock(
    sku: str | None = None,
    query: str | None = None,
    warehouse: str | None = None,
    context: ToolContext | None = None,
) -> list[dict[str, Any]]:
    """Stock of one SKU, or of every product whose name matches ``query``, per warehouse."""
    data = _data(context)
    wh = _check_warehouse(data, warehouse)
    if sku:
        wanted = sku.strip().upper()
        for item in data["items"]:
            if item["sku"] == wanted:
                return [_record(item, wh)]
        raise ValueError(f"No product with SKU {wanted}. Search by name with `query` instead.")
    if not query or not query.strip():
        raise ValueError("Give either a SKU or a product name to search for.")
    hits = [_record(item, wh) for item in data["items"] if _matches(item, query)]
    if not hits:
        raise ValueError(f"No product matches {query.strip()!r}; try a shorter or other name.")
    return hits


def list_low_stock(
    threshold: int | None = None,
    warehouse: str | None = None,
    category: str | None = None,
    context: ToolContext | None = None,
) -> list[dict[str, Any]]:
    """SKU/warehouse pairs whose available stock is at or below the threshold.

    Without ``threshold`` each product's own reorder point is used. Sorted by how far below
    the threshold they are (out of stock first).
    """
    data = _data(context)
    wh = _check_warehouse(data, warehouse)
    rows = []
    for item in data["items"]:
        if category and item["category"] != category:
            continue
        limit = item["reorder_point"] if threshold is None else threshold
        for row in item["stock"]:
            if wh and row["warehouse_id"] != wh:
                continue
            available = row["on_hand"] - row["reserved"]
            if available <= limit:
                rows.append(
                    {
                        "sku": item["sku"],
                        "name": item["name"],
                        "warehouse_id": row["warehouse_id"],
                        "available": available,
                        "on_hand": row["on_hand"],
                        "reserved": row["reserved"],
                        "threshold": limit,
                        "shortfall": limit - available,
                        "unit": item["unit"],
                    }
                )
    rows.sort(key=lambda r: (r["available"] / max(r["threshold"], 1), r["sku"], r["warehouse_id"]))
    return rows
