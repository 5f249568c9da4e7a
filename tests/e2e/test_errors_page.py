"""What the page says when a run fails and when the service is gone; the keyboard alone."""

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

    # After a reload the failure is still said where it happened, and unfolds its trace.
    page.reload()
    kept = page.locator(".message.assistant.failed")
    expect(kept.locator(".run-error")).to_contain_text("The run failed:")
    kept.locator(".trace summary").click()
    expect(kept.locator(".trace-body")).to_contain_text("model_auth_failed")
    # A step that failed without a message of its own says so, not "failed:" and nothing.
    expect(kept.locator(".steps li.failed .step-time")).to_have_text("failed")

    service.stop()
    page.get_by_role("textbox", name="Message").fill("are you there?")
    page.keyboard.press("Enter")
    expect(page.locator(".run-error").last).to_have_text(
        "The message was not sent: the service cannot be reached."
    )
    expect(page.locator("#banner")).to_contain_text("Cannot reach the Skilldesk service")
    expect(page.get_by_role("button", name="Retry")).to_be_visible()


def test_the_page_is_used_from_the_keyboard_alone_in_light_and_dark(page: Any) -> None:
    page.goto("/")
    # The admin's tab is shown once the page has learned who it is (an async call).
    expect(page.get_by_role("button", name="API keys")).to_be_visible()
    order = []
    for _ in range(6):
        page.keyboard.press("Tab")
        order.append(page.evaluate("document.activeElement.innerText.trim()"))
    assert order == [
        "Skip to content",
        "Chat",
        "Approvals",
        "Skills & workflows",
        "API keys",  # development mode: the local user is an admin
        "Sign in with a key",
    ]
    page.keyboard.press("Shift+Tab")
    page.keyboard.press("Shift+Tab")
    page.keyboard.press("Enter")  # opens the browser view
    expect(page.locator("#view-browser")).to_be_visible()
    expect(page.locator("#view-chat")).to_be_hidden()
    background = "getComputedStyle(document.body).backgroundColor"
    light = page.evaluate(background)
    page.emulate_media(color_scheme="dark")
    assert page.evaluate(background) != light


def test_the_page_loads_without_an_error_in_the_console(page: Any) -> None:
    said: list[str] = []
    page.on("console", lambda m: m.type == "error" and said.append(m.text))
    failed: list[str] = []
    page.on("response", lambda r: r.status >= 400 and failed.append(f"{r.status} {r.url}"))
    page.goto("/", wait_until="networkidle")
    expect(page.locator("#mode")).to_have_text("Development mode (no key needed)")
    page.wait_for_timeout(500)  # the browser asks for an icon after the page loaded
    assert (said, failed) == ([], [])


def test_a_title_of_only_spaces_is_refused_in_the_page_not_sent(
    page: Any, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="Hi."))
    page.goto("/")
    page.get_by_role("textbox", name="Message").fill("hello")
    page.keyboard.press("Enter")
    expect(page.locator(".answer[aria-busy='false']")).to_have_text("Hi.")
    renames: list[str] = []
    page.on("request", lambda r: r.method == "PATCH" and renames.append(r.url))
    page.get_by_role("button", name="Rename").click()
    title = page.get_by_label("New title")
    title.fill("   ")
    title.press("Enter")
    expect(title).to_be_visible()  # still asked for
    assert title.evaluate("input => input.validity.valid") is False
    assert title.evaluate("input => input.validationMessage") != ""
    title.press("Escape")
    expect(page.locator("#thread-title")).to_have_text("hello")
    expect(page.locator("#banner")).to_be_hidden()
    assert renames == []


def test_an_error_banner_goes_once_a_later_action_succeeds_or_it_is_dismissed(
    page: Any, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="Hi."))
    page.goto("/#thread=no-such-thread")
    banner = page.locator("#banner")
    expect(banner).to_contain_text("That thread does not exist, or it is not yours.")
    # Starting the page again would not help: no Retry, a way to put it away instead.
    expect(page.get_by_role("button", name="Retry")).to_be_hidden()
    page.get_by_role("textbox", name="Message").fill("hello")
    page.keyboard.press("Enter")
    expect(page.locator(".answer[aria-busy='false']")).to_have_text("Hi.")
    expect(banner).to_be_hidden()

    page.goto("about:blank")
    page.goto("/#thread=no-such-thread")
    expect(banner).to_be_visible()
    page.get_by_role("button", name="Dismiss").click()
    expect(banner).to_be_hidden()
    expect(page.get_by_role("textbox", name="Message")).to_be_focused()
