"""Order look-up and search over the orders shipped in ``assets/orders.json``."""

from __future__ import annotations

import json
import re
from datetime import date
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agents.skills.context import ToolContext

_ORDER_ID = re.compile(r"^ORD-?(\d{4,6})$")
SUMMARY_FIELDS = (
    "order_id",
    "customer",
    "status",
    "items",
    "total_amount",
    "currency",
    "created_at",
    "carrier",
    "tracking_number",
)


def _orders(context: ToolContext | None) -> tuple[dict[str, Any], ...]:
    skill_dir = context.skill_dir if context else Path(__file__).resolve().parent
    return _load(Path(skill_dir) / "assets" / "orders.json")


@lru_cache(maxsize=4)
def _load(path: Path) -> tuple[dict[str, Any], ...]:
    with path.open(encoding="utf-8") as fh:
        return tuple(json.load(fh)["orders"])


def _normalise_id(order_id: str) -> str:
    match = _ORDER_ID.match(order_id.strip().upper())
    if not match:
        raise ValueError(f"{order_id!r} is not an order number; order numbers look like ORD1001.")
    return f"ORD{match.group(1)}"


def _parse_date(value: str | None, field: str) -> date | None:
    if value is None:
        return None
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{field} {value!r} is not a date in the form YYYY-MM-DD.") from None


def _summary(order: dict[str, Any]) -> dict[str, Any]:
    out = {key: order.get(key) for key in SUMMARY_FIELDS}
    out["items"] = ", ".join(f"{item['product']} x{item['quantity']}" for item in order["items"])
    return out


def get_order(order_id: str, context: ToolContext | None = None) -> dict[str, Any]:
    """Return one order with its items, payment, shipping and tracking details."""
    wanted = _normalise_id(order_id)
    for order in _orders(context):
        if order["order_id"] == wanted:
            return dict(order)
    raise ValueError(
        f"No order {wanted} was found. Ask the user to check the order number "
        "(it is in the confirmation e-mail, e.g. ORD1001)."
    )


def search_orders(
    product: str | None = None,
    status: str | None = None,
    customer: str | None = None,
    date_from: str | None = None,
    date_to: str | None = None,
    limit: int = 10,
    context: ToolContext | None = None,
) -> list[dict[str, Any]]:
    """Orders matching every given filter, newest first, as short summaries.

    ``product`` matches a product name (English or Chinese) or SKU as a substring,
    ``customer`` a customer name or id; the date range is inclusive on order dates.
    """
    start = _parse_date(date_from, "date_from")
    end = _parse_date(date_to, "date_to")
    if start and end and start > end:
        raise ValueError(f"date_from {date_from} is after date_to {date_to}.")
    needle = product.strip().casefold() if product else None
    who = customer.strip().casefold() if customer else None

    hits = []
    for order in _orders(context):
        if status and order["status"] != status:
            continue
        created = date.fromisoformat(order["created_at"][:10])
        if (start and created < start) or (end and created > end):
            continue
        if (
            who
            and who not in order["customer"].casefold()
            and who != order["customer_id"].casefold()
        ):
            continue
        if needle and not any(
            needle in item["product"].casefold()
            or needle in item["product_zh"]
            or needle == item["sku"].casefold()
            for item in order["items"]
        ):
            continue
        hits.append(order)
    hits.sort(key=lambda o: o["created_at"], reverse=True)
    return [_summary(order) for order in hits[:limit]]
