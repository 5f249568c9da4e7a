"""Chat in the page: a streamed answer, its trace, Markdown kept safe, threads after a reload."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import answered_by, run_time, screenshot
from tests.fakellm import FakeLLM, Reply, ToolCall
from tests.integration.test_server_process import Service

QUESTION = "Where is my order ORD1001, what is its tracking status?"
ANSWER = (
    "Order **ORD1001** has shipped and should arrive soon. "
    "<img src=x onerror=\"document.title='owned'\"> "
    "[details](javascript:alert(1))"
)


# The router as it runs by default, with the embedding model: the trace shows both scores.
@pytest.mark.parametrize("extra_env", [{"SKILLDESK_SKILLS_EMBEDDINGS": "true"}])
def test_an_answer_streams_in_unfolds_its_trace_and_the_thread_is_there_after_a_reload(
    page: Any, fake_llm: FakeLLM, service: Service
) -> None:
    fake_llm.script(
        Reply(tool_calls=[ToolCall("get_order", {"order_id": "ORD1001"})]),
        Reply(content=ANSWER, stream_chunk_delay=0.15),
    )
    page.goto("/")
    expect(page.locator("#mode")).to_have_text("Development mode (no key needed)")
    page.get_by_label("Message").fill(QUESTION)
    page.keyboard.press("Enter")

    # Tokens arrive while the run is still going: part of the answer, the rest still to come.
    streaming = page.locator(".message.assistant .answer[aria-busy='true']")
    expect(streaming).to_contain_text("Order ORD1001")
    assert "arrive soon" not in streaming.inner_text()
    answer = page.locator(".message.assistant .answer[aria-busy='false']")
    expect(answer).to_contain_text("should arrive soon")
    expect(answer.locator("strong")).to_have_text("ORD1001")  # Markdown rendered
    # The model's HTML is text, its javascript: link not a link; nothing ran.
    assert answer.locator("img").count() == 0
    assert answer.locator("a[href^='javascript']").count() == 0
    assert page.title() == "Skilldesk"

    trace = page.locator(".message.assistant .trace")
    trace.locator("summary").click()
    route = trace.locator(".route")
    expect(route).to_contain_text("order-query")
    best = route.locator("table.scores tbody tr").first
    expect(best).to_contain_text("order-query")
    assert float(best.locator("td").nth(1).inner_text()) > 0  # the embedding's score
    expect(trace.locator(".steps li").first).to_contain_text(" ms")
    expect(trace.locator(".tool-args")).to_contain_text('"order_id": "ORD1001"')
    expect(trace.locator(".tool-result")).to_contain_text("ORD1001")
    expect(trace.locator(".usage")).to_contain_text("2 model calls")
    # Folded, its summary says the route, the tool calls and the time the answer took: the
    # run's own, as the service kept it. QA: the page's clock (the request and the stream
    # too) said 0.1 s, and after a reload the run's 0.04 s read "0.0 s".
    thread_id = page.evaluate("sessionStorage.getItem('skilldesk.thread')")
    [run_id] = answered_by(service, thread_id)
    took = run_time(service, thread_id, run_id)
    summary = f"How this answer was reached (skill → order-query · 1 tool call · {took})"
    expect(trace.locator("summary")).to_have_text(summary)
    expect(trace.locator(".usage")).to_contain_text(f" · {took}")
    screenshot(page, "chat-trace")

    # The thread is listed, survives a reload, can be renamed and deleted.
    thread = page.locator("#thread-list .thread").first
    expect(thread).to_contain_text(QUESTION)
    page.reload()
    expect(page.locator(".message.user")).to_contain_text(f"You said:{QUESTION}")
    expect(page.locator(".message.assistant")).to_contain_text("should arrive soon")
    # The answer's trace was kept by the service: it unfolds after the reload too.
    kept = page.locator(".message.assistant .trace")
    expect(kept.locator("summary")).to_have_text(summary)  # as the live one, still folded
    kept.locator("summary").click()
    expect(kept.locator(".route table.scores tbody tr").first).to_contain_text("order-query")
    expect(kept.locator(".steps li").first).to_contain_text(" ms")
    expect(kept.locator(".tool-args")).to_contain_text('"order_id": "ORD1001"')
    expect(kept.locator(".tool-result")).to_contain_text("ORD1001")
    expect(kept.locator(".usage")).to_contain_text("2 model calls")
    expect(kept.locator("summary")).to_contain_text("1 tool call")
    page.get_by_role("button", name="Rename").click()
    page.get_by_label("New title").fill("Order ORD1001")
    page.keyboard.press("Enter")
    expect(page.locator("#thread-list .thread").first).to_contain_text("Order ORD1001")

    page.set_viewport_size({"width": 390, "height": 844})
    # At phone width nothing needs a sideways scroll and the composer is all there.
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    for name in ("Send", "New thread", "Threads"):
        box = page.get_by_role("button", name=name, exact=True).bounding_box()
        assert box is not None
        assert box["x"] >= 0
        assert box["x"] + box["width"] <= 390
    screenshot(page, "phone")
    page.set_viewport_size({"width": 1280, "height": 860})

    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Delete").click()
    expect(page.locator("#thread-list")).to_contain_text("No threads yet.")
    expect(page.locator(".message")).to_have_count(0)


def test_a_stream_cut_after_the_route_is_read_again_from_where_it_stopped(
    page: Any, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="All the words arrive in the end."))
    cut = {}

    def drop_after_the_route(route: Any) -> None:
        # The service's own response, ended after its route decision, as a dropped connection
        # would leave it: the page has to fetch the rest itself.
        response = route.fetch()
        blocks = response.text().split("\n\n")
        kept = next(i for i, block in enumerate(blocks) if "event: route_decided" in block)
        cut["last_id"] = next(
            line[4:] for line in blocks[kept].splitlines() if line.startswith("id: ")
        )
        route.fulfill(response=response, body="\n\n".join(blocks[: kept + 1]) + "\n\n")

    page.route("**/runs/stream", drop_after_the_route)
    page.goto("/")
    page.get_by_role("textbox", name="Message").fill("hello")
    with page.expect_request(re.compile(r"/runs/[^/]+/stream$")) as again:
        page.keyboard.press("Enter")
    assert again.value.method == "GET"
    assert again.value.headers["last-event-id"] == cut["last_id"]
    expect(page.locator(".answer[aria-busy='false']")).to_have_text(
        "All the words arrive in the end."
    )
    assert page.locator(".run-error").count() == 0


# Drawn in the page's own font: a character the fonts lack comes out as the same empty box
# as a private-use one.
DRAWN = """(text) => {
  const canvas = document.createElement("canvas");
  canvas.width = 200;
  canvas.height = 40;
  const g = canvas.getContext("2d");
  g.font = getComputedStyle(document.body).font;
  const pixels = (s) => {
    g.clearRect(0, 0, 200, 40);
    g.fillText(s, 0, 30);
    return Array.from(g.getImageData(0, 0, 200, 40).data).join(",");
  };
  return pixels(text) !== pixels("\\uE000".repeat([...text].length));
}"""


def test_chinese_japanese_and_korean_text_is_drawn_not_boxes(page: Any) -> None:
    page.goto("/")
    for text in ("订单", "注文", "주문"):
        assert page.evaluate(DRAWN, text), f"{text} is drawn as boxes: no CJK font"


def test_a_message_sent_while_the_page_still_loads_keeps_its_answer(
    page: Any, fake_llm: FakeLLM
) -> None:
    words = "Answered while the page was still loading."
    fake_llm.script(Reply(content=words, stream_chunk_delay=0.2))
    held: list[Any] = []
    page.route("**/v1/me", lambda route: held.append(route))  # start() waits on who the user is
    page.goto("/")
    page.get_by_role("textbox", name="Message").fill("hello early")
    page.keyboard.press("Enter")
    expect(page.locator(".answer[aria-busy='true']")).to_contain_text("Answered")
    held[0].continue_()  # start() goes on mid-answer: it must not open the thread anew over it
    expect(page.locator("#mode")).to_have_text("Development mode (no key needed)")
    expect(page.locator(".answer[aria-busy='false']")).to_have_text(words)
    expect(page.locator(".message.user")).to_have_count(1)
    expect(page.locator("#banner")).to_be_hidden()


def test_a_new_thread_started_while_a_linked_one_loads_stays_new(
    page: Any, fake_llm: FakeLLM, service: Service
) -> None:
    fake_llm.script(Reply(content="An older answer."))
    url = f"{service.url}/v1/threads/linked-1/runs/stream"
    made = httpx.post(url, json={"message": "older"}, timeout=60)  # answered when it returns
    assert "An older answer." in made.text, made.text
    held: list[Any] = []
    page.route("**/v1/threads/linked-1", lambda route: held.append(route))
    page.goto("/#thread=linked-1")
    for _ in range(200):  # the page's start asks for the linked thread, and waits
        if held:
            break
        page.wait_for_timeout(50)
    assert held, "the linked thread was not asked for"
    page.get_by_role("button", name="New thread").click()
    held[0].continue_()  # the linked thread arrives after the user moved on: it gives way
    page.get_by_role("textbox", name="Message").fill("a fresh start")
    expect(page.locator("#thread-title")).to_have_text("New conversation")
    expect(page.locator(".message")).to_have_count(0)


def test_older_threads_are_listed_a_page_at_a_time_and_open_with_their_title(
    page: Any, service: Service
) -> None:
    for n in range(55):  # the page lists 50 at a time
        made = httpx.post(f"{service.url}/v1/threads", json={"title": f"Trip {n:02}"}, timeout=30)
        assert made.status_code == 201, made.text
    page.goto("/")
    threads = page.locator("#thread-list .thread")
    expect(threads).to_have_count(50)
    expect(threads.first).to_contain_text("Trip 54")
    page.get_by_role("button", name="Older threads").click()
    expect(threads).to_have_count(55)
    expect(page.get_by_role("button", name="Older threads")).to_have_count(0)
    threads.last.click()
    # The oldest thread was on no first page: its title comes with the thread itself.
    expect(page.locator("#thread-title")).to_have_text("Trip 00")


def test_a_malformed_thread_link_still_starts_the_page(page: Any) -> None:
    # decodeURIComponent threw on a bad escape before anything started: a blank page.
    page.goto("/#thread=%E0%A4%A")
    expect(page.locator("#mode")).to_have_text("Development mode (no key needed)")
    expect(page.locator("#thread-title")).to_have_text("New conversation")


def test_the_address_names_the_open_thread_and_an_answers_table_has_borders(
    page: Any, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="| Order | State |\n| --- | --- |\n| ORD1001 | shipped |"))
    page.goto("/")
    page.get_by_role("textbox", name="Message").fill("my orders")
    page.keyboard.press("Enter")
    table = page.locator(".answer[aria-busy='false'] table")
    expect(table).to_contain_text("shipped")
    thread = page.evaluate("sessionStorage.getItem('skilldesk.thread')")
    expect(page).to_have_url(re.compile(f"#thread={thread}$"))  # a link to copy
    for cell in (table.locator("th").first, table.locator("td").first):
        assert cell.evaluate("c => getComputedStyle(c).borderTopStyle") == "solid"
    page.get_by_role("button", name="Skills & workflows").click()
    expect(page).to_have_url(re.compile("#browser$"))
    page.get_by_role("button", name="Chat").click()
    expect(page).to_have_url(re.compile(f"#thread={thread}$"))
    link = page.url
    page.get_by_role("button", name="New thread").click()
    expect(page).to_have_url(re.compile(r"/$"))
    other = page.context.new_page()  # the link, pasted into another tab
    other.goto(link)
    expect(other.locator(".message.assistant")).to_contain_text("shipped")
    other.close()
