"""What the conversation graph's tests share: the shop-floor skills, a turn and its events,
and how a scripted model recognises an expert's skill."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from langchain_core.messages import HumanMessage

from agents.events import Event, RouteDecided, RunFinished
from app.services import Services
from tests.fakellm import Reply, RequestView, ToolCall
from tests.skillkit import FIXTURE_SKILLS, copy_fixture_skills, signature

SHOP_FLOOR = FIXTURE_SKILLS / "shop-floor"
ORDERS = signature(SHOP_FLOOR / "order-lookup")
ALARMS = signature(SHOP_FLOOR / "device-alarms")


def make_skills(root: Path) -> Path:
    """The shop-floor skills: order-lookup, device-alarms, ticket-desk (tools) and
    holiday-calendar, leave-balance (instructions only)."""
    return copy_fixture_skills(root, "shop-floor")


async def turn(
    services: Services, text: str, thread: str | None = None, **options: Any
) -> list[Event]:
    """Run one turn with ``text`` (on a new thread unless given) and collect its events."""
    thread = thread or uuid.uuid4().hex
    return [e async for e in services.conversations.stream(thread, [HumanMessage(text)], **options)]


def final(events: list[Event]) -> RunFinished:
    """The run's last event, which must be RunFinished."""
    last = events[-1]
    assert isinstance(last, RunFinished), last
    return last


def route_of(events: list[Event]) -> RouteDecided:
    """The run's route decision."""
    return next(e for e in events if isinstance(e, RouteDecided))


def expert_for(request: RequestView) -> str:
    """The one skill an expert's request holds: its instructions and its tools."""
    [name] = request.skills([ORDERS, ALARMS])
    return name


# A message the learning tests route: first through the model, then from what was learned.
PUMP = "status of the delivery for the broken pump"
PUMP_AGAIN = "what is the status of the delivery for my broken pump"


def order_lookup(request: RequestView) -> Reply:
    """An expert holding the order tool: calls it, then answers from its result."""
    if request.results_of("get_order"):
        return Reply(content="ORD1001 has shipped.")
    assert request.offers("get_order"), request.describe()
    return Reply(tool_calls=[ToolCall("get_order", {"order_id": "ORD1001"})])
