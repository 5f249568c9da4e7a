"""The bundled order-query and inventory handlers do what they say."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bundledkit import SKILLS, ctx, handler

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
