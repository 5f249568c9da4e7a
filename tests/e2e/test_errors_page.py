"""What the page says when a run fails, when the service is gone, and about API keys."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import expect

from tests.fakellm import FakeLLM, Reply
from tests.integration.test_server_process import Service


def test_a_failed_run_and_an_unreachable_service_are_said_plainly(
    page: Any, fake_llm: FakeLLM, service: Service
) -> None:
    fake_llm.script(Reply(status=401, error_message="Incorrect API key provided"))
    page.goto("/")
    page.get_by_role("textbox", name="Message").fill("hello there")
    page.keyboard.press("Enter")
    failed = page.locator(".message.assistant .run-error")
    expect(failed).to_contain_text("The run failed:")
    expect(failed).to_have_attribute("role", "alert")

    service.stop()
    page.get_by_role("textbox", name="Message").fill("are you there?")
    page.keyboard.press("Enter")
    expect(page.locator(".run-error").last).to_have_text(
        "The message was not sent: the service cannot be reached."
    )
    expect(page.locator("#banner")).to_contain_text("Cannot reach the Skilldesk service")
    expect(page.get_by_role("button", name="Retry")).to_be_visible()


def test_a_key_is_sent_as_a_bearer_token_and_a_refused_key_asks_for_another(page: Any) -> None:
    page.goto("/")
    expect(page.locator("#mode")).to_have_text("Development mode (no key)")
    page.get_by_role("button", name="Sign in with a key").click()
    expect(page.get_by_label("API key")).to_be_focused()
    page.keyboard.type("sk-user-1")
    with page.expect_request("**/v1/threads?limit=50") as listing:
        page.keyboard.press("Enter")
    assert listing.value.headers["authorization"] == "Bearer sk-user-1"
    expect(page.locator("#mode")).to_have_text("Signed in with a key")
    assert page.evaluate("sessionStorage.getItem('skilldesk.key')") == "sk-user-1"
    assert page.evaluate("localStorage.length") == 0  # the session only

    # The service does not check keys yet (issue #16): its 401 answer is played here.
    page.route(
        "**/v1/threads?limit=50",
        lambda route: route.fulfill(
            status=401,
            json={"error": {"message": "Unknown key.", "type": "auth", "code": "invalid_api_key"}},
        ),
    )
    page.reload()
    expect(page.locator("#banner")).to_contain_text("Your API key was refused")
    expect(page.get_by_label("API key")).to_be_visible()
    page.unroute("**/v1/threads?limit=50")
    page.get_by_role("button", name="Sign out").click()
    expect(page.locator("#mode")).to_have_text("Development mode (no key)")
    assert page.evaluate("sessionStorage.getItem('skilldesk.key')") is None


def test_the_page_is_used_from_the_keyboard_alone_in_light_and_dark(page: Any) -> None:
    page.goto("/")
    order = []
    for _ in range(5):
        page.keyboard.press("Tab")
        order.append(page.evaluate("document.activeElement.innerText.trim()"))
    assert order == [
        "Skip to content",
        "Chat",
        "Approvals",
        "Skills & workflows",
        "Sign in with a key",
    ]
    page.keyboard.press("Shift+Tab")
    page.keyboard.press("Enter")  # opens the browser view
    expect(page.locator("#view-browser")).to_be_visible()
    expect(page.locator("#view-chat")).to_be_hidden()
    background = "getComputedStyle(document.body).backgroundColor"
    light = page.evaluate(background)
    page.emulate_media(color_scheme="dark")
    assert page.evaluate(background) != light
