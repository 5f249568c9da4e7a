"""The page's main views pass axe-core with no serious or critical violation, light and dark:
the chat with an answer and its trace, an approval card, the approvals inbox, the skills and
workflows browser; the streamed answer is announced, and the keyboard reaches every part."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import expect

from tests.e2e.accessibility import check_in_light_and_dark
from tests.fakellm import FakeLLM, Reply, ToolCall


def test_the_chat_the_inbox_and_the_browser_have_no_serious_accessibility_violation(
    page: Any, fake_llm: FakeLLM
) -> None:
    fake_llm.script(
        Reply(tool_calls=[ToolCall("get_order", {"order_id": "ORD1001"})]),
        Reply(content="Order **ORD1001** has shipped.\n\n- one\n- two"),
    )
    page.goto("/")
    check_in_light_and_dark(page, "empty chat")
    page.get_by_role("textbox", name="Message").fill("Where is my order ORD1001?")
    page.keyboard.press("Enter")
    expect(page.locator(".answer[aria-busy='false']")).to_contain_text("has shipped")
    page.locator(".message.assistant .trace summary").click()
    expect(page.locator(".trace .tool-args")).to_be_visible()
    # Results long enough to scroll (whether this one does depends on fonts and width): a
    # scrolling box must be reachable from the keyboard.
    page.add_style_tag(content=".trace pre { max-height: 2.5rem; }")
    assert page.evaluate(
        "[...document.querySelectorAll('.trace pre')].some(p => p.scrollHeight > p.clientHeight)"
    )
    check_in_light_and_dark(page, "chat with an answer and its trace")

    page.get_by_role("textbox", name="Message").fill("I want a refund for order ORD1002.")
    page.keyboard.press("Enter")
    expect(page.locator(".messages .approval")).to_contain_text("Approval needed")
    check_in_light_and_dark(page, "chat with an approval card")

    page.get_by_role("button", name="Approvals").click()
    expect(page.locator("#inbox .approval")).to_have_count(1)
    check_in_light_and_dark(page, "approvals inbox")

    page.get_by_role("button", name="Skills & workflows").click()
    page.get_by_label("Search skills").fill("where is my order")
    page.keyboard.press("Enter")
    expect(page.locator("#search-results tbody tr").first).to_be_visible()
    page.locator("#skill-list button, #skill-list a").first.click()
    expect(page.locator("#detail")).not_to_be_empty()
    check_in_light_and_dark(page, "skills browser, a skill")
    page.locator("#workflow-list button, #workflow-list a").first.click()
    expect(page.locator("#detail svg")).to_be_visible()
    check_in_light_and_dark(page, "skills browser, a workflow's graph")

    page.set_viewport_size({"width": 390, "height": 844})
    page.get_by_role("button", name="Chat").click()
    check_in_light_and_dark(page, "chat at phone width")


WATCH = """() => {
  window.seen = [];
  const record = () => {
    const answer = document.querySelector(".message.assistant .answer");
    if (!answer) return;
    const status = document.getElementById("composer-status").textContent;
    window.seen.push([answer.getAttribute("aria-live"), answer.getAttribute("aria-busy"), status,
                      answer.textContent]);
  };
  const watch = { subtree: true, childList: true, attributes: true, characterData: true };
  new MutationObserver(record).observe(document.getElementById("messages"), watch);
  new MutationObserver(record).observe(document.getElementById("composer-status"), watch);
}"""

FOCUSED = """(() => {
  const e = document.activeElement;
  const name = e.getAttribute("aria-label") || e.labels?.[0]?.innerText || e.innerText || "";
  return name.trim().split("\\n")[0];
})()"""


def test_the_streamed_answer_is_announced_and_the_keyboard_goes_through_the_chat_in_order(
    page: Any, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="# Shipped\n\nYour order has shipped.", stream_chunk_delay=0.15))
    page.goto("/")
    # What the answer's region and the composer's status say at each change, recorded in the
    # page (a poll from the test could miss the streaming state on a busy machine).
    page.evaluate(WATCH)
    page.get_by_role("textbox", name="Message").fill("hello")
    page.keyboard.press("Enter")
    expect(page.locator(".answer[aria-busy='false']")).to_contain_text("has shipped")
    # The status is cleared when the run ends, which may come just after the answer is whole.
    expect(page.locator("#composer-status")).to_have_text("")
    seen = page.evaluate("window.seen")
    # While it streams: a polite live region, busy until the answer is whole (then read once);
    # the composer's status says it is answering. Then the status is cleared.
    busy = [s for s in seen if s[1] == "true"]
    assert busy, seen
    assert all(s[0] == "polite" and s[2] == "Answering…" for s in busy), busy
    assert "has shipped" in busy[-1][3]  # whole before the region stops being busy
    assert seen[-1][:3] == ["polite", "false", ""]
    expect(page.get_by_role("textbox", name="Message")).to_be_focused()
    # The answer's own heading sits under the thread's title in the outline.
    headings = page.evaluate(
        "[...document.querySelectorAll('main h2, main h3')].filter((h) => h.offsetParent"
        " && h.innerText).map((h) => `${h.tagName} ${h.innerText}`)"
    )
    assert headings[:2] == ["H2 hello", "H3 Shipped"]

    page.get_by_role("link", name="Skip to content").focus()  # the page's first stop
    order = [page.evaluate(FOCUSED)]
    for _ in range(14):
        page.keyboard.press("Tab")
        order.append(page.evaluate(FOCUSED))
    assert order[:10] == [
        "Skip to content",
        "Chat",
        "Approvals",
        "Skills & workflows",
        "API keys",  # development mode: the local user is an admin
        "Sign in with a key",
        "New thread",
        "hello",  # the thread
        "Rename",
        "Delete",
    ]
    assert order[10] == "Edit this message: hello"  # the message, then its answer
    assert order[11].startswith("How this answer was reached")
    assert order[12:] == ["Message", "Attach a file", "Send"]
    page.keyboard.press("Shift+Tab")
    page.keyboard.press("Shift+Tab")
    page.keyboard.press("Shift+Tab")
    page.keyboard.press("Enter")  # the trace unfolds from the keyboard
    expect(page.locator(".message.assistant .trace")).to_have_attribute("open", "")
