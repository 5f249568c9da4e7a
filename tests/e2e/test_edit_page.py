"""Editing an earlier message in the page: the edit goes to a new thread holding what came
before it (the original thread stays as it was), and messages that only the summary carries
now are marked as such and cannot be edited."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

from tests.fakellm import FakeLLM, Reply
from tests.integration.test_server_process import Service


def say(page: Any, text: str, answer: str) -> None:
    page.get_by_role("textbox", name="Message").fill(text)
    page.keyboard.press("Enter")
    expect(page.locator(".answer[aria-busy='false']").last).to_have_text(answer)
    expect(page.locator("#send")).to_be_enabled()  # the turn is over: the next can go


def test_an_edited_message_is_answered_in_a_new_thread_and_the_original_stays(
    page: Any, fake_llm: FakeLLM, service: Service
) -> None:
    fake_llm.script(
        Reply(content="First answer."),
        Reply(content="Second answer."),
        Reply(content="Answer to the edit."),
    )
    page.goto("/")
    say(page, "hello one", "First answer.")
    say(page, "hello two", "Second answer.")
    original = page.evaluate("sessionStorage.getItem('skilldesk.thread')")

    page.get_by_role("button", name="Edit this message: hello two").click()
    box = page.get_by_role("textbox", name="Edited message")
    expect(box).to_be_focused()
    expect(box).to_have_value("hello two")
    box.fill("hello edited")
    page.keyboard.press("Enter")

    expect(page.locator(".answer[aria-busy='false']").last).to_have_text("Answer to the edit.")
    edited = page.evaluate("sessionStorage.getItem('skilldesk.thread')")
    assert edited != original
    expect(page.locator(".message.user .text")).to_have_text(["hello one", "hello edited"])
    # The model saw what came before the edited message, and the edit, nothing after it.
    seen = [(m["role"], m["content"]) for m in fake_llm.requests[-1]["messages"][1:]]
    assert seen == [
        ("user", "hello one"),
        ("assistant", "First answer."),
        ("user", "hello edited"),
    ]
    kept = httpx.get(f"{service.url}/v1/threads/{original}").json()["messages"]
    assert [m["content"] for m in kept] == [
        "hello one",
        "First answer.",
        "hello two",
        "Second answer.",
    ]
    expect(page.locator("#thread-list .thread")).to_have_count(2)
    # The fork is told apart from its source in the list, and above its messages.
    expect(page.locator("#thread-list .thread-title")).to_have_text(
        ["hello one (edited)", "hello one"]
    )
    expect(page.locator("#thread-title")).to_have_text("hello one (edited)")
    # The answer the fork copied unfolds how it was reached, as in the original thread.
    copied = page.locator(".message.assistant").first
    copied.locator(".trace summary").click()
    expect(copied.locator(".trace .route")).to_be_visible()

    # Cancel (Escape) leaves the message as it was, with its Edit button focused again.
    page.get_by_role("button", name="Edit this message: hello one").click()
    page.keyboard.press("Escape")
    expect(page.get_by_role("button", name="Edit this message: hello one")).to_be_focused()
    expect(page.locator(".message.user .text").first).to_have_text("hello one")


SUMMARISING = {"SKILLDESK_SUMMARY_AFTER_MESSAGES": "4", "SKILLDESK_SUMMARY_AFTER_TOKENS": "0"}


@pytest.mark.parametrize("extra_env", [SUMMARISING])
def test_messages_only_the_summary_carries_are_marked_and_not_editable(
    page: Any, fake_llm: FakeLLM
) -> None:
    fake_llm.script(
        Reply(content="First answer."),
        Reply(content="Second answer."),
        Reply(content="The user said hello twice [#0 user] [#2 user]."),  # the summary
        Reply(content="Third answer."),
    )
    page.goto("/")
    say(page, "hello one", "First answer.")
    say(page, "hello two", "Second answer.")
    say(page, "hello three", "Third answer.")
    page.reload()
    summarised = page.locator(".message.summarised")
    expect(summarised.first).to_contain_text("hello one")
    expect(summarised.first).to_contain_text("Summarised")
    expect(summarised.first.get_by_role("button")).to_have_count(0)  # not editable
    last = page.locator(".message.user").last
    expect(last).to_contain_text("hello three")
    expect(last).not_to_have_class("summarised")
    expect(last.get_by_role("button", name="Edit this message: hello three")).to_be_visible()


def test_an_edits_mark_stays_in_sight_however_long_its_title(page: Any, fake_llm: FakeLLM) -> None:
    # QA: the list cut titles at its width: an edit's "(edited)" was cut off with the rest,
    # and the edit and its source looked alike.
    fake_llm.script(Reply(content="First."), Reply(content="Second."), Reply(content="Edited."))
    first = "please look into the order I placed last week for the garden furniture set"
    page.goto("/")
    say(page, first, "First.")
    say(page, "and the second one", "Second.")
    page.get_by_role("button", name="Edit this message: and the second one").click()
    page.get_by_role("textbox", name="Edited message").fill("and the other one")
    page.keyboard.press("Enter")
    expect(page.locator(".answer[aria-busy='false']").last).to_have_text("Edited.")
    fork = page.locator("#thread-list .thread").first
    mark = fork.locator(".thread-edited")
    expect(mark).to_have_text(" (edited)")
    expect(mark).to_be_visible()
    box, seen = fork.bounding_box(), mark.bounding_box()
    assert box is not None
    assert seen is not None
    assert seen["x"] + seen["width"] <= box["x"] + box["width"]  # inside its button, in sight
    name = fork.locator(".thread-name")
    assert name.evaluate("e => e.scrollWidth > e.clientWidth")  # the rest of the title is cut
    # The whole title (as the service cut it) in its tooltip.
    whole = re.compile(r"^please look into the order I placed last week .*\u2026 \(edited\)$")
    expect(fork.locator(".thread-title")).to_have_attribute("title", whole)
