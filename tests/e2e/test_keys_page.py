"""Signing in with an API key: kept for the browser session only, sent as a Bearer token; a
user does not see another user's thread, and a refused key asks for another."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from tests.fakellm import FakeLLM, Reply

ALICE = "alice-key-0123456789abcdef"
BOB = "bob-key-0123456789abcdef"


@pytest.fixture
def extra_env() -> dict[str, str]:
    return {"SKILLDESK_API_KEYS": f"alice:chat:{ALICE} bob:chat,approve:{BOB}"}


def sign_in(page: Any, key: str) -> None:
    page.get_by_label("API key").fill(key)
    with page.expect_request("**/v1/me") as me:
        page.get_by_label("API key").press("Enter")
    assert me.value.headers["authorization"] == f"Bearer {key}"


def test_a_user_signs_in_with_a_key_and_is_refused_another_users_thread(
    page: Any, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="Hello Alice."))
    page.goto("/")
    expect(page.locator("#banner")).to_contain_text("This service needs an API key")
    expect(page.get_by_label("API key")).to_be_focused()

    sign_in(page, ALICE)
    expect(page.locator("#mode")).to_have_text("Signed in as alice (chat)")
    expect(page.get_by_role("button", name="Approvals")).to_be_hidden()  # no approve scope
    assert page.evaluate("sessionStorage.getItem('skilldesk.key')") == ALICE
    assert page.evaluate("localStorage.length") == 0  # the session only
    page.get_by_role("textbox", name="Message").fill("hello")
    page.keyboard.press("Enter")
    expect(page.locator(".answer[aria-busy='false']")).to_have_text("Hello Alice.")
    thread = page.evaluate("sessionStorage.getItem('skilldesk.thread')")

    page.get_by_role("button", name="Sign out").click()
    expect(page.locator("#mode")).to_have_text("Not signed in")
    assert page.evaluate("sessionStorage.getItem('skilldesk.key')") is None
    sign_in(page, BOB)
    expect(page.locator("#mode")).to_have_text("Signed in as bob (approve, chat)")
    expect(page.locator("#thread-list")).to_contain_text("No threads yet.")
    expect(page.get_by_role("button", name="Approvals")).to_be_visible()

    # A link to Alice's thread, opened by Bob: refused, nothing of it shown.
    page.goto("about:blank")
    page.goto(f"/#thread={thread}")
    expect(page.locator("#banner")).to_contain_text("does not exist, or it is not yours")
    expect(page.locator(".message")).to_have_count(0)

    page.get_by_role("button", name="Sign out").click()
    sign_in(page, "not-a-key-0123456789abcdef")
    expect(page.locator("#banner")).to_contain_text("Your API key was refused")
    expect(page.get_by_label("API key")).to_be_visible()
