"""A long thread on a desktop and on a phone: the page itself does not grow past the window,
and the latest message and the message box are what a thread opens on."""

from __future__ import annotations

from typing import Any

import httpx
from playwright.sync_api import expect

from tests.fakellm import FakeLLM, Reply
from tests.integration.test_server_process import Service

LONG = ("Lorem ipsum dolor sit amet, the answer goes on. " * 60).strip()


def long_thread(service: Service, fake_llm: FakeLLM, thread_id: str, turns: int = 4) -> None:
    """A thread of ``turns`` questions, each answered at length, made through the API."""
    fake_llm.script(*[Reply(content=f"{LONG} End of answer {n}.") for n in range(turns)])
    for n in range(turns):
        url = f"{service.url}/v1/threads/{thread_id}/runs/stream"
        made = httpx.post(url, json={"message": f"question {n}"}, timeout=60)
        assert f"End of answer {n}." in made.text, made.text


def test_a_long_thread_scrolls_inside_its_list_not_the_whole_page(
    page: Any, fake_llm: FakeLLM, service: Service
) -> None:
    long_thread(service, fake_llm, "long-1")
    page.goto("/#thread=long-1")
    expect(page.locator(".message.assistant")).to_have_count(4)
    # The hidden "Answer:" labels are placed within their messages, not at the page's height.
    height, window = page.evaluate("[document.scrollingElement.scrollHeight, innerHeight]")
    assert height <= window, f"the page is {height} px tall in a {window} px window"
    messages = page.locator("#messages")
    assert messages.evaluate("m => m.scrollHeight > m.clientHeight")  # its list scrolls
    expect(page.get_by_text("End of answer 3.")).to_be_in_viewport()


def test_on_a_phone_a_long_thread_opens_on_its_latest_message_and_the_message_box(
    browser: Any, fake_llm: FakeLLM, service: Service
) -> None:
    long_thread(service, fake_llm, "long-2")
    context = browser.new_context(
        base_url=service.url, viewport={"width": 375, "height": 740}, is_mobile=True
    )
    try:
        page = context.new_page()
        page.goto("/#thread=long-2")
        expect(page.locator(".message.assistant")).to_have_count(4)
        expect(page.get_by_text("End of answer 3.")).to_be_in_viewport()
        expect(page.get_by_role("textbox", name="Message")).to_be_in_viewport()
    finally:
        context.close()
