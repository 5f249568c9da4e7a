"""Files in the page: an upload is listed, and the speech skill's WAV plays in an <audio>."""

from __future__ import annotations

import shutil
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.fakellm import FakeLLM, Reply, ToolCall


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="needs espeak-ng (CI installs it)")
def test_an_uploaded_file_is_listed_and_the_spoken_answer_plays(
    page: Any, fake_llm: FakeLLM
) -> None:
    fake_llm.script(
        Reply(tool_calls=[ToolCall("synthesize_speech", {"text": "The line restarts at noon."})]),
        Reply(content="Here is the announcement as audio."),
    )
    page.goto("/")
    page.get_by_label("Attach a file").set_input_files(
        files=[{"name": "notes.txt", "mimeType": "text/plain", "buffer": b"Line 3 restarts."}]
    )
    expect(page.locator("#composer-status")).to_have_text("notes.txt attached.")
    expect(page.locator("#file-list .file")).to_contain_text("notes.txt (text/plain, 16 B)")

    page.get_by_role("textbox", name="Message").fill(
        "Read this announcement aloud: the line restarts at noon."
    )
    page.keyboard.press("Enter")
    expect(page.locator(".answer[aria-busy='false']")).to_contain_text("announcement as audio")
    audio = page.locator("#file-list audio")
    expect(audio).to_have_count(1)
    expect(page.locator("#file-list .file").last).to_contain_text("audio/wav")
    # The WAV decodes and plays: the browser knows its length and its clock moves.
    audio.evaluate("a => a.play()")
    page.wait_for_function(
        "() => { const a = document.querySelector('#file-list audio');"
        " return a.duration > 0.5 && a.currentTime > 0.1 && !a.error; }"
    )


def test_a_file_whose_name_has_quotes_is_listed_under_that_name(page: Any) -> None:
    page.goto("/")
    expect(page.locator("#mode")).to_have_text("Development mode (no key needed)")
    name = 'bad "name" <x>.txt'  # Chromium sends the quotes as %22
    page.get_by_label("Attach a file").set_input_files(
        files=[{"name": name, "mimeType": "text/plain", "buffer": b"Some notes."}]
    )
    expect(page.locator("#composer-status")).to_have_text(f"{name} attached.")
    expect(page.locator("#file-list .file-name")).to_have_text(name)


def test_a_file_attached_while_the_page_still_loads_is_listed(page: Any) -> None:
    # The page's start opened "no thread" over the thread the upload was making, so the
    # upload said "attached" and its file was never listed.
    me: list[Any] = []
    made: list[Any] = []
    page.route("**/v1/me", lambda route: me.append(route))  # start() waits on who the user is
    page.route(
        "**/v1/threads",
        lambda route: made.append(route) if route.request.method == "POST" else route.continue_(),
    )
    page.goto("/")
    page.get_by_label("Attach a file").set_input_files(
        files=[{"name": "early.txt", "mimeType": "text/plain", "buffer": b"Attached early."}]
    )
    for _ in range(100):  # the upload asks for its thread
        if made:
            break
        page.wait_for_timeout(50)
    assert made, "the upload did not ask for a thread"
    me[0].continue_()
    expect(page.locator("#mode")).to_have_text("Development mode (no key needed)")
    page.wait_for_timeout(300)  # start() has listed the threads and chosen what to open
    made[0].continue_()
    expect(page.locator("#composer-status")).to_have_text("early.txt attached.")
    expect(page.locator("#file-list .file")).to_contain_text("early.txt (text/plain, 15 B)")
