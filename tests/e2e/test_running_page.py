"""An answer under way: after a reload or a restart its thread shows it coming and then whole;
meanwhile the other threads stay usable and keep their own files; a message the service
refuses goes back into the box."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import httpx
from playwright.sync_api import expect

from tests.fakellm import FakeLLM, Reply
from tests.integration.test_server_process import Service

SLOW = " ".join(f"word{n}" for n in range(24)) + " END."


def slow(delay: float = 0.3) -> Reply:
    return Reply(content=SLOW, stream_chunk_delay=delay)


def status_of(service: Service, thread_id: str) -> str:
    listed = httpx.get(f"{service.url}/v1/threads?limit=100", timeout=30).json()["data"]
    return next(t["status"] for t in listed if t["thread_id"] == thread_id)


def wait_idle(service: Service, thread_id: str) -> None:
    deadline = time.monotonic() + 60
    while status_of(service, thread_id) == "running":
        assert time.monotonic() < deadline, "the run did not end"
        time.sleep(0.2)


def test_a_reload_mid_answer_shows_the_answer_streaming_on_and_then_whole(
    page: Any, fake_llm: FakeLLM
) -> None:
    fake_llm.script(slow())
    page.goto("/")
    page.get_by_role("textbox", name="Message").fill("tell me slowly")
    page.keyboard.press("Enter")
    expect(page.locator(".answer[aria-busy='true']")).to_contain_text("word2")
    page.reload()
    # The run goes on in the service: the page joins it, from its first event.
    answer = page.locator(".message.assistant .answer")
    expect(answer).to_have_attribute("aria-busy", "true")
    expect(answer).to_contain_text("word0 word1 word2")
    expect(page.locator("#composer-status")).to_have_text("Answering…")
    expect(page.get_by_role("button", name="Send")).to_be_disabled()
    expect(page.locator(".message.assistant")).to_contain_text("END.")
    expect(page.get_by_role("button", name="Send")).to_be_enabled()
    expect(page.locator("#composer-status")).to_be_empty()
    expect(page.locator(".message.assistant")).to_have_count(1)  # the answer once, whole
    expect(page.locator(".message.assistant")).to_contain_text(SLOW)


def test_after_a_restart_the_resumed_answer_is_said_to_be_on_its_way_then_shown(
    page: Any, fake_llm: FakeLLM, service: Service
) -> None:
    fake_llm.script(slow(0.4), Reply(content="The answer after the restart.", delay=2.0))
    page.goto("/")
    page.get_by_role("textbox", name="Message").fill("tell me slowly")
    page.keyboard.press("Enter")
    expect(page.locator(".answer[aria-busy='true']")).to_contain_text("word2")
    service.proc.kill()  # the process dies mid-answer; a new one resumes the run
    service.proc.wait(timeout=30)
    service.restart()
    page.reload()
    # Joined under the resumed run's id, or said to be on its way while the thread still
    # names the run that died with its process: either way, being answered.
    expect(page.locator(".message.assistant .answer[aria-busy='true']")).to_have_count(1)
    expect(page.get_by_role("button", name="Send")).to_be_disabled()
    expect(page.locator(".message.assistant")).to_contain_text("The answer after the restart.")
    expect(page.locator(".message.assistant")).to_have_count(1)
    expect(page.get_by_role("button", name="Send")).to_be_enabled()


def test_an_answer_another_client_started_is_shown_streaming_when_its_thread_is_opened(
    page: Any, fake_llm: FakeLLM, service: Service
) -> None:
    # The thread names its run under way, so a tab that did not start it joins it too.
    fake_llm.script(slow())
    started = httpx.post(
        f"{service.url}/v1/threads/elsewhere/runs", json={"message": "tell me slowly"}, timeout=30
    )
    assert started.status_code == 202, started.text
    thread = httpx.get(f"{service.url}/v1/threads/elsewhere", timeout=30).json()
    assert (thread["status"], thread["run_id"]) == ("running", started.json()["id"])
    page.goto("/#thread=elsewhere")
    answer = page.locator(".message.assistant .answer[aria-busy='true']")
    expect(answer).to_contain_text("word3")
    assert "on its way" not in answer.inner_text()
    expect(page.locator(".message.assistant")).to_contain_text("END.")
    expect(page.get_by_role("button", name="Send")).to_be_enabled()
    wait_idle(service, "elsewhere")
    listed = httpx.get(f"{service.url}/v1/threads", timeout=30).json()["data"]
    assert [t["run_id"] for t in listed if t["thread_id"] == "elsewhere"] == [None]


def test_another_thread_is_used_while_one_answers_and_the_answer_is_there_on_return(
    page: Any, fake_llm: FakeLLM
) -> None:
    fake_llm.script(slow(0.6), Reply(content="A quick answer."))
    page.goto("/")
    box = page.get_by_role("textbox", name="Message")
    box.fill("tell me slowly")
    page.keyboard.press("Enter")
    expect(page.locator(".answer[aria-busy='true']")).to_contain_text("word1")

    page.get_by_role("button", name="New thread").click()
    send = page.get_by_role("button", name="Send")
    expect(send).to_be_enabled(timeout=3000)  # at once, not when the other answer ends
    expect(page.locator("#composer-status")).to_be_empty(timeout=3000)
    box.fill("something quick")
    page.keyboard.press("Enter")  # not swallowed: this thread is not answering
    expect(page.locator(".answer[aria-busy='false']")).to_have_text("A quick answer.")

    page.locator("#thread-list .thread", has_text="tell me slowly").click()
    expect(page.locator(".message.user")).to_have_count(1)
    answer = page.locator(".message.assistant .answer")
    expect(answer).to_contain_text("word1")
    expect(send).to_be_disabled()  # this one still answers
    expect(answer).to_have_text(SLOW)
    expect(answer).to_have_attribute("aria-busy", "false")
    expect(send).to_be_enabled()


def test_a_thread_opened_while_another_answers_does_not_get_its_files(
    page: Any, fake_llm: FakeLLM, service: Service
) -> None:
    fake_llm.script(Reply(content="Nothing attached here."), slow(0.2))
    made = httpx.post(f"{service.url}/v1/threads/plain/runs/stream", json={"message": "hi"})
    assert "Nothing attached here." in made.text, made.text
    page.goto("/")
    page.get_by_label("Attach a file").set_input_files(
        files=[{"name": "notes.txt", "mimeType": "text/plain", "buffer": b"Line 3 restarts."}]
    )
    expect(page.locator("#file-list .file")).to_contain_text("notes.txt")
    with_files = page.evaluate("sessionStorage.getItem('skilldesk.thread')")
    page.get_by_role("textbox", name="Message").fill("tell me slowly")
    page.keyboard.press("Enter")
    expect(page.locator(".answer[aria-busy='true']")).to_contain_text("word1")

    page.locator("#thread-list .thread", has_text="hi").click()
    expect(page.locator(".message.assistant")).to_contain_text("Nothing attached here.")
    expect(page.locator("#files")).to_be_hidden()
    with page.expect_response(lambda r: "/v1/threads?limit" in r.url):  # the list, after it
        wait_idle(service, with_files)
    page.wait_for_timeout(500)
    expect(page.locator("#files")).to_be_hidden()
    expect(page.locator("#thread-title")).to_have_text("hi")


def test_a_message_the_service_refuses_is_put_back_in_the_box_and_leaves_no_thread(
    page: Any, service: Service
) -> None:
    # It left a "You said" bubble beside the text put back (the message twice), the thread
    # titled after it, and an empty thread in the list.
    body = {"error": {"code": "rate_limited", "message": "Too many requests: wait a minute."}}
    page.route(
        "**/runs/stream",
        lambda route: route.fulfill(
            status=429, content_type="application/json", body=json.dumps(body)
        ),
    )
    page.goto("/")
    box = page.get_by_role("textbox", name="Message")
    box.fill("a long question I do not want to type again")
    with page.expect_request(lambda r: r.method == "DELETE"):  # the thread made for it
        page.keyboard.press("Enter")
    expect(page.locator("#composer-status")).to_contain_text(
        "The message was refused: Too many requests: wait a minute. (rate_limited)"
    )
    expect(box).to_have_value("a long question I do not want to type again")
    expect(page.get_by_role("button", name="Send")).to_be_enabled()
    expect(page.locator(".message")).to_have_count(0)
    expect(page.locator("#thread-title")).to_have_text("New conversation")
    expect(page.locator("#thread-list")).to_contain_text("No threads yet.")
    assert httpx.get(f"{service.url}/v1/threads", timeout=30).json()["data"] == []


def test_a_message_over_the_limit_is_said_so_in_the_page_and_not_sent(page: Any) -> None:
    sent: list[str] = []
    page.on("request", lambda r: r.method == "POST" and sent.append(r.url))
    page.goto("/")
    expect(page.locator("#mode")).to_have_text("Development mode (no key needed)")
    box = page.get_by_role("textbox", name="Message")
    box.fill("x" * 100_001)
    page.keyboard.press("Enter")
    expect(page.locator("#composer-status")).to_have_text(
        "Not sent: the message is 100,001 characters long, and the limit is 100,000. "
        "Shorten it by 1."
    )
    expect(box).to_have_attribute("aria-invalid", "true")
    assert box.input_value() == "x" * 100_001  # still there to shorten, once
    expect(page.locator(".message")).to_have_count(0)
    expect(page.locator("#thread-title")).to_have_text("New conversation")
    expect(page.locator("#thread-list")).to_contain_text("No threads yet.")
    assert sent == []
    box.press("Backspace")
    expect(box).not_to_have_attribute("aria-invalid", "true")


def test_a_new_conversation_is_listed_while_its_first_answer_comes(
    page: Any, fake_llm: FakeLLM
) -> None:
    # 20 s of answer: listed, left and reopened well before its end, on a busy machine too.
    # Listed by the title the page sent, though the page may ask before the service has
    # written the run's record (it has the thread untitled then).
    fake_llm.script(slow(0.8))
    page.goto("/")
    page.get_by_role("textbox", name="Message").fill("tell me slowly")
    page.keyboard.press("Enter")
    expect(page.locator(".answer[aria-busy='true']")).to_contain_text("word1")
    listed = page.locator("#thread-list .thread", has_text="tell me slowly")
    expect(listed).to_have_count(1)
    assert "END." not in page.locator(".message.assistant").inner_text()  # still answering
    page.get_by_role("button", name="New thread").click()
    expect(page.locator(".message")).to_have_count(0)
    listed.click()  # reopened while it answers: the answer goes on there
    expect(page.locator("#thread-title")).to_have_text("tell me slowly")
    expect(page.locator(".message.user")).to_have_count(1)
    answer = page.locator(".message.assistant .answer")
    expect(answer).to_have_attribute("aria-busy", "true")
    expect(answer).to_have_text(SLOW, timeout=60_000)
    expect(page.locator(".message.assistant")).to_have_count(1)


def test_after_the_service_comes_back_retry_shows_the_open_threads_answer_whole(
    page: Any, fake_llm: FakeLLM, service: Service
) -> None:
    fake_llm.script(slow(0.4), Reply(content="The answer after the restart."))
    page.goto("/")
    page.get_by_role("textbox", name="Message").fill("tell me slowly")
    page.keyboard.press("Enter")
    expect(page.locator(".answer[aria-busy='true']")).to_contain_text("word2")
    service.proc.kill()  # the process dies mid-answer
    service.proc.wait(timeout=30)
    lost = page.locator(".run-error")
    expect(lost).to_contain_text("The connection to the service was lost", timeout=30_000)
    service.restart()  # a new process resumes the run
    page.get_by_role("button", name="Retry").click()
    expect(page.locator(".message.assistant")).to_contain_text("The answer after the restart.")
    expect(lost).to_have_count(0)
    expect(page.locator(".message.assistant")).to_have_count(1)
    expect(page.get_by_role("button", name="Send")).to_be_enabled()


def test_an_answer_is_stopped_and_delete_and_edit_wait_while_it_comes(
    page: Any, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="First."), slow(0.4))
    page.goto("/")
    box = page.get_by_role("textbox", name="Message")
    box.fill("hello")
    page.keyboard.press("Enter")
    expect(page.locator(".answer[aria-busy='false']")).to_have_text("First.")
    stop = page.get_by_role("button", name="Stop")
    expect(stop).to_be_hidden()
    box.fill("tell me slowly")
    page.keyboard.press("Enter")
    expect(page.locator(".answer[aria-busy='true']")).to_contain_text("word1")
    expect(stop).to_be_visible()

    asked: list[str] = []
    page.on("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
    delete = page.get_by_role("button", name="Delete")
    expect(delete).to_have_attribute("aria-disabled", "true")
    delete.click(force=True)  # said why, not asked to confirm and then refused
    status = page.locator("#composer-status")
    expect(status).to_contain_text("This thread is answering: stop the answer")
    edit = page.get_by_role("button", name=re.compile("Edit this message: hello"))
    expect(edit).to_have_attribute("aria-disabled", "true")
    edit.click(force=True)
    expect(status).to_contain_text("before editing a message")
    expect(page.get_by_label("Edited message")).to_have_count(0)
    assert asked == []

    with page.expect_request(re.compile(r"/runs/[0-9a-f-]+/cancel$")):
        stop.click()
    last = page.locator(".message.assistant").last
    expect(last).to_contain_text("Stopped as asked")
    expect(last.locator(".answer")).to_have_attribute("aria-busy", "false")
    assert "END." not in last.inner_text()
    expect(stop).to_be_hidden()
    expect(page.get_by_role("button", name="Send")).to_be_enabled()
    expect(delete).to_have_attribute("aria-disabled", "false")
    expect(status).to_be_empty()
    page.reload()  # the stop is said where it happened after a reload too
    expect(page.locator(".message.assistant").last).to_contain_text("Stopped as asked")


def test_a_thread_that_still_says_it_runs_a_finished_run_is_not_joined_over_and_over(
    page: Any, fake_llm: FakeLLM, service: Service
) -> None:
    # A record left saying "running" (its last bookkeeping cut short): the page joined the
    # ended run, reopened the thread, saw "running" again, and joined it again, in a loop.
    import sqlite3

    fake_llm.script(Reply(content="Long done."))
    made = httpx.post(
        f"{service.url}/v1/threads/stale/runs/stream", json={"message": "hi"}, timeout=60
    )
    assert "Long done." in made.text, made.text
    run_id = made.headers["X-Run-Id"]
    with sqlite3.connect(service.data_dir / "skilldesk.sqlite", timeout=10) as db:
        db.execute(
            "UPDATE skilldesk_documents SET status = 'running', "
            "body = json_set(body, '$.status', 'running', '$.run_id', ?) "
            "WHERE kind = 'thread' AND id = 'stale'",
            (run_id,),
        )
    joined: list[str] = []
    page.on(
        "request", lambda r: joined.append(r.url) if f"/runs/{run_id}/stream" in r.url else None
    )
    page.goto("/#thread=stale")
    expect(page.locator(".message.assistant").first).to_contain_text("Long done.")
    page.wait_for_timeout(2000)
    assert len(joined) <= 1, joined
