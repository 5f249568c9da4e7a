"""A workflow started from chat waits for an approval; it is approved from the inbox, after a
reload, and the thread hears how the run ended."""

from __future__ import annotations

import re
import time
from datetime import datetime
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import screenshot
from tests.e2e.test_keys_page import sign_in
from tests.fakellm import FakeLLM
from tests.integration.test_server_process import Service

CAROL = "carol-key-0123456789abcdef"  # chat, not approve
DANA = "dana-key-0123456789abcdef"  # chat and approve


def test_a_refund_started_from_chat_is_approved_from_the_inbox_after_a_reload(
    page: Any, fake_llm: FakeLLM
) -> None:
    page.goto("/")
    page.get_by_role("textbox", name="Message").fill("I want a refund for order ORD1002.")
    page.get_by_role("button", name="Send").click()

    # The workflow's nodes arrive in the trace; its approval gate shows a card in the chat.
    card = page.locator(".messages .approval")
    expect(card).to_contain_text("Approval needed")
    expect(card.locator(".approval-summary")).to_contain_text("ORD1002")
    # QA: the live card said only its step; reloaded, also its workflow and when it asked.
    expect(card).to_contain_text("workflow refund-request, step approve, asked ")
    said_waiting(page, card)
    trace = page.locator(".message.assistant .trace")
    trace.locator("summary").click()
    expect(trace.locator(".route")).to_contain_text("refund-request")
    expect(trace.locator(".steps")).to_contain_text("refund-request · order")
    expect(trace.locator(".steps")).to_contain_text("approve — waiting for approval")
    # The workflow's graph marks the nodes that ran and the one that waits.
    graph = trace.locator(".graph svg")
    expect(graph.locator("g.node.current")).to_contain_text("Agent approval")
    expect(graph.locator("g.node.done")).to_have_count(2)  # the order looked up, the switch
    expect(trace.locator(".graph")).to_have_attribute("aria-label", re.compile("approve current"))
    expect(page.locator("#approval-count")).to_have_text("1")
    trace.locator("summary").click()
    card.get_by_label("Comment").focus()
    screenshot(page, "approval-card")

    # After a reload the card is still in the thread, and the inbox has it.
    page.reload()
    expect(page.locator(".messages .approval .approval-summary")).to_contain_text("ORD1002")
    approve_from_the_inbox(page, "ORD1002")


def said_waiting(page: Any, card: Any) -> None:
    """The chat says in words what waits (the workflow, what it asks), not the approval's id."""
    answer = page.locator(".message.assistant").first
    expect(answer).to_contain_text("The refund-request procedure is waiting for approval: Refund")
    expect(answer).not_to_contain_text(card.get_attribute("data-approval"))


def approve_from_the_inbox(page: Any, order: str) -> None:
    """Approve the one waiting run from the inbox; back in the chat, the thread was told
    how the run ended."""
    page.get_by_role("button", name="Approvals").click()
    inbox = page.locator("#inbox .approval")
    expect(inbox).to_have_count(1)
    expect(inbox.locator(".approval-summary")).to_contain_text(order)
    # When it was asked, in local time (the approval does not say who asked).
    expect(inbox.locator(".approval-context")).to_contain_text(
        "workflow refund-request, step approve, asked "
    )
    asked = inbox.locator(".approval-context time").get_attribute("datetime") or ""
    assert abs(time.time() - datetime.fromisoformat(asked).timestamp()) < 600, asked
    inbox.get_by_label("Comment").fill("Checked the receipt.")
    inbox.get_by_role("button", name="Approve").click()
    expect(inbox.locator(".status")).to_contain_text("Approved. Run succeeded")
    expect(page.locator("#approval-count")).to_be_hidden()
    page.get_by_role("button", name="Chat").click()
    page.locator("#thread-list .thread").first.click()
    told = page.locator(".message.assistant").last
    expect(told).to_contain_text("approved")
    expect(page.locator(".messages .approval")).to_have_count(0)
    # That message unfolds the steps that ran after the decision, on the workflow's graph.
    told.locator(".trace summary").click()
    # The approval step was decided: no time of its own (that of the node resuming) shown.
    expect(told.locator(".steps")).to_contain_text("refund-request · approve — decided")
    # QA: folded, it said "(0.0 s)": the nodes after the decision took some milliseconds.
    took = re.compile(r"^How this answer was reached \((< 1 ms|\d+ ms|[1-9]\d*\.\d s)\)$")
    expect(told.locator(".trace summary")).to_have_text(took)
    expect(told.locator(".graph svg g.node.done").first).to_be_visible()


def test_a_run_waiting_for_approval_is_approved_after_a_service_restart(
    page: Any, service: Service
) -> None:
    page.goto("/")
    page.get_by_role("textbox", name="Message").fill("I want a refund for order ORD1003.")
    page.get_by_role("button", name="Send").click()
    expect(page.locator(".messages .approval .approval-summary")).to_contain_text("ORD1003")

    service.restart()  # the same data, the same address: a new process
    page.reload()
    expect(page.locator(".messages .approval .approval-summary")).to_contain_text("ORD1003")
    # How the waiting answer was reached was kept through the restart too.
    trace = page.locator(".message.assistant .trace")
    trace.locator("summary").click()
    expect(trace.locator(".route")).to_contain_text("refund-request")
    expect(trace.locator(".steps")).to_contain_text("approve — waiting for approval")
    expect(page.locator("#approval-count")).to_have_text("1")
    approve_from_the_inbox(page, "ORD1003")


def test_the_inbox_shows_older_approvals_a_page_at_a_time(page: Any, service: Service) -> None:
    with httpx.Client(base_url=service.url, timeout=30) as client:
        for n in range(51):
            body = {"inputs": {"order_id": "ORD1002"}, "thread_id": f"wait-{n:02d}"}
            made = client.post("/v1/workflows/refund-request/runs", json=body)
            assert made.json()["status"] == "WAITING", made.text
    page.goto("/")
    expect(page.locator("#approval-count")).to_have_text("51")
    page.get_by_role("button", name="Approvals").click()
    cards = page.locator("#inbox .approval")
    expect(cards).to_have_count(50)
    older = page.get_by_role("button", name="Show older approvals")
    older.click()
    expect(cards).to_have_count(51)
    expect(older).to_be_hidden()


def test_a_decision_in_the_inbox_or_on_the_card_shows_its_outcome_in_the_open_thread(
    page: Any,
) -> None:
    page.goto("/")
    page.get_by_role("textbox", name="Message").fill("I want a refund for order ORD1002.")
    page.get_by_role("button", name="Send").click()
    card = page.locator(".messages .approval")
    expect(card.locator(".approval-summary")).to_contain_text("ORD1002")

    page.get_by_role("button", name="Approvals").click()
    inbox = page.locator("#inbox .approval")
    inbox.get_by_label("Comment").fill("Outside the returns window.")
    inbox.get_by_role("button", name="Reject").click()
    expect(inbox.locator(".status")).to_contain_text("Rejected.")
    page.get_by_role("button", name="Chat").click()  # the open thread, as it is now
    expect(card).to_have_count(0)
    expect(page.locator(".message.assistant").last).to_contain_text("Outside the returns window.")

    page.get_by_role("textbox", name="Message").fill("I want a refund for order ORD1003.")
    page.get_by_role("button", name="Send").click()
    expect(card.locator(".approval-summary")).to_contain_text("ORD1003")
    card.get_by_role("button", name="Approve").click()
    # No reload needed: the outcome is in the thread, and the status line says it.
    expect(page.locator(".message.assistant").last).to_contain_text("approved")
    expect(card).to_have_count(0)
    expect(page.locator("#composer-status")).to_contain_text("Approved. Run succeeded")


def test_a_decision_taken_elsewhere_shows_in_the_open_thread_and_in_other_approvers_badges(
    page: Any, browser: Any, service: Service
) -> None:
    # The requester's card said it waited until a reload; another approver's badge kept its
    # count until they acted.
    page.goto("/")
    page.get_by_role("textbox", name="Message").fill("I want a refund for order ORD1002.")
    page.get_by_role("button", name="Send").click()
    card = page.locator(".messages .approval")
    expect(card.locator(".approval-summary")).to_contain_text("ORD1002")
    expect(page.locator("#approval-count")).to_have_text("1")
    context = browser.new_context(base_url=service.url, viewport={"width": 1280, "height": 860})
    try:
        approver = context.new_page()
        approver.goto("/")
        expect(approver.locator("#approval-count")).to_have_text("1")

        with httpx.Client(base_url=service.url, timeout=60) as client:
            waiting = client.get("/v1/approvals").json()["approvals"]
            assert [a["summary"] for a in waiting if "ORD1002" in a["summary"]], waiting
            decided = client.post(
                f"/v1/approvals/{waiting[0]['approval_id']}",
                json={"decision": "approve", "by": "dana", "comment": "From the CLI."},
            )
            assert decided.status_code == 200, decided.text
        # No click, no reload: the open thread shows how the run ended.
        expect(page.locator(".message.assistant").last).to_contain_text("approved")
        expect(card).to_have_count(0)
        expect(page.locator("#composer-status")).to_contain_text("Decided. Run succeeded")
        expect(page.locator("#approval-count")).to_be_hidden()
        expect(approver.locator("#approval-count")).to_be_hidden(timeout=20_000)
    finally:
        context.close()


@pytest.mark.parametrize("extra_env", [{"SKILLDESK_API_KEYS": f"carol:chat:{CAROL}"}])
def test_a_chat_only_user_still_sees_what_waits_on_their_thread_after_a_reload(page: Any) -> None:
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url))
    page.goto("/")
    sign_in(page, CAROL)
    expect(page.locator("#mode")).to_have_text("Signed in as carol (chat)")
    page.get_by_role("textbox", name="Message").fill("I want a refund for order ORD1002.")
    page.get_by_role("button", name="Send").click()
    card = page.locator(".messages .approval")
    expect(card.locator(".approval-summary")).to_contain_text("ORD1002")
    expect(card).to_contain_text("It waits for someone with the approve scope.")
    said_waiting(page, card)

    # The thread carries what waits on it: no approvals list asked (Carol may not read it).
    page.reload()
    expect(card.locator(".approval-summary")).to_contain_text("ORD1002")
    expect(card).to_contain_text("It waits for someone with the approve scope.")
    expect(card.get_by_role("button", name="Approve")).to_have_count(0)
    said_waiting(page, card)
    assert not [url for url in asked if "/v1/approvals" in url], asked

    # The status line keeps its height when it says something: the composer does not move.
    status = page.locator("#composer-status")
    empty = status.bounding_box()
    status.evaluate("node => { node.textContent = 'Answering…'; }")
    assert status.bounding_box() == empty


@pytest.mark.parametrize(
    "extra_env", [{"SKILLDESK_API_KEYS": f"carol:chat:{CAROL} dana:chat,approve:{DANA}"}]
)
def test_a_chat_only_users_card_follows_a_decision_taken_by_an_approver(
    page: Any, service: Service
) -> None:
    page.goto("/")
    sign_in(page, CAROL)
    page.get_by_role("textbox", name="Message").fill("I want a refund for order ORD1002.")
    page.get_by_role("button", name="Send").click()
    card = page.locator(".messages .approval")
    expect(card).to_contain_text("It waits for someone with the approve scope.")

    with httpx.Client(base_url=service.url, timeout=60) as client:
        dana = {"Authorization": f"Bearer {DANA}"}
        waiting = client.get("/v1/approvals", headers=dana).json()["approvals"]
        assert len(waiting) == 1, waiting
        decided = client.post(
            f"/v1/approvals/{waiting[0]['approval_id']}",
            json={"decision": "approve", "comment": "Fine."},
            headers=dana,
        )
        assert decided.status_code == 200, decided.text
    # No reload: Carol's card follows her run (she may read it: GET /v1/workflow-runs/{id}),
    # and the thread then shows how it ended.
    expect(card).to_have_count(0)
    expect(page.locator("#composer-status")).to_contain_text("Decided. Run succeeded")
    expect(page.locator(".message.assistant").last).to_contain_text("approved")
