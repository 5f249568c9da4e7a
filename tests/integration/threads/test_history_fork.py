"""History lists a thread's checkpoints; a fork starts a new thread from one of them and
leaves the original as it was; an edited earlier message is a fork plus the new message."""

from __future__ import annotations

import itertools
import json
from typing import Any

from fastapi.testclient import TestClient

from app.main import create_app
from tests.fakellm import FakeLLM, Reply, ToolCall
from tests.integration.threads.conftest import say


def test_a_thread_made_and_not_used_yet_has_an_empty_history(client: TestClient) -> None:
    # It was a 404 "There is no thread" while GET /v1/threads/{id} showed it (QA).
    assert client.post("/v1/threads", json={"thread_id": "made"}).status_code == 201
    made = client.get("/v1/threads/made/history")
    assert made.status_code == 200, made.text
    assert made.json()["data"] == []
    assert client.get("/v1/threads/never-made/history").status_code == 404


def test_history_lists_each_checkpoint_with_its_node_and_change(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="Blue noted."), Reply(content="Blue."), Reply(content="Hi."))
    say(client, "h", "My colour is blue.")
    say(client, "h", "What is my colour?")
    say(client, "other", "Hello.")

    history = client.get("/v1/threads/h/history").json()["data"]
    newest = history[0]
    assert newest["next"] == []  # the last run ended
    assert newest["messages"] == 4
    assert newest["node"] == "assistant"
    assert newest["change"].startswith("+1 assistant: Blue.")
    inputs = [h for h in history if h["node"] == "input"]
    assert [h["change"] for h in inputs] == [
        "+1 user: What is my colour?",
        "+1 user: My colour is blue.",
    ]
    assert [h["change"] for h in history if h["node"] == "route"] == ["route general"] * 2
    assert [h["change"] for h in history if h["source"] == "input"] == ["a run starts"] * 2
    assert all(h["parent_id"] == older["checkpoint_id"] for h, older in itertools.pairwise(history))
    assert [h["step"] for h in history] == sorted((h["step"] for h in history), reverse=True)

    page = client.get("/v1/threads/h/history", params={"limit": 2}).json()
    assert page["has_more"] is True
    after = client.get(
        "/v1/threads/h/history", params={"before": page["data"][-1]["checkpoint_id"]}
    ).json()["data"]
    assert after[0]["checkpoint_id"] == history[2]["checkpoint_id"]
    # A cursor that names no checkpoint of the thread is refused (it gave the first page: a
    # client paging with it would loop), another thread's too.
    for cursor in ("nonexistent", client.get("/v1/threads/other/history").json()["data"][0]):
        cursor = cursor if isinstance(cursor, str) else cursor["checkpoint_id"]
        bad = client.get("/v1/threads/h/history", params={"before": cursor})
        assert bad.status_code == 404, bad.text
        error = bad.json()["error"]
        assert (error["code"], error["param"]) == ("checkpoint_not_found", "before")


def test_a_fork_starts_from_the_checkpoint_and_leaves_the_original_untouched(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    fake_llm.script(
        Reply(content="Blue noted."), Reply(content="Blue."), Reply(content="Green noted.")
    )
    say(client, "orig", "My colour is blue.")
    say(client, "orig", "What is my colour?")
    history = client.get("/v1/threads/orig/history").json()["data"]
    # The end of the first turn: where the second message was sent.
    first_turn = next(h for h in history if h["messages"] == 2 and h["next"] == [])

    forked = client.post(
        "/v1/threads/orig/fork",
        json={"checkpoint_id": first_turn["checkpoint_id"], "thread_id": "edit"},
    )
    assert forked.status_code == 201
    assert forked.json()["forked_from"] == {
        "thread_id": "orig",
        "checkpoint_id": first_turn["checkpoint_id"],
    }
    assert forked.json()["messages"] == 2
    # The edited second message goes to the fork.
    say(client, "edit", "Actually it is green.")
    edit = [m["content"] for m in client.get("/v1/threads/edit").json()["messages"]]
    assert edit == ["My colour is blue.", "Blue noted.", "Actually it is green.", "Green noted."]
    orig = [m["content"] for m in client.get("/v1/threads/orig").json()["messages"]]
    assert orig == ["My colour is blue.", "Blue noted.", "What is my colour?", "Blue."]
    # The model saw the fork's history, not the original's second turn.
    assert "What is my colour?" not in str(fake_llm.requests[-1]["messages"])


def test_a_fork_needs_a_checkpoint_of_the_thread(client: TestClient, fake_llm: FakeLLM) -> None:
    fake_llm.script(Reply(content="Hi."))
    say(client, "src", "Hello")
    for where in ({}, {"checkpoint_id": "x", "before_message": 0}):
        refused = client.post("/v1/threads/src/fork", json=where)
        assert refused.status_code == 400
        assert "exactly one of checkpoint_id" in refused.json()["error"]["message"]
    unknown = client.post("/v1/threads/src/fork", json={"checkpoint_id": "nope"})
    assert unknown.status_code == 404
    assert unknown.json()["error"]["code"] == "checkpoint_not_found"
    assert client.post("/v1/threads/none/fork", json={"checkpoint_id": "x"}).status_code == 404
    latest = client.get("/v1/threads/src/history").json()["data"][0]["checkpoint_id"]
    taken = client.post("/v1/threads/src/fork", json={"checkpoint_id": latest, "thread_id": "src"})
    assert taken.status_code == 409


def test_an_earlier_message_is_edited_by_its_index(client: TestClient, fake_llm: FakeLLM) -> None:
    fake_llm.script(
        Reply(content="Blue noted."),
        Reply(content="Blue."),
        Reply(content="Noted."),
        Reply(content="Green noted."),
    )
    for message in ("My colour is blue.", "What is my colour?", "Thanks."):
        say(client, "long", message)
    # Message 2 ("What is my colour?") is replaced: the fork ends before it.
    forked = client.post("/v1/threads/long/fork", json={"before_message": 2})
    assert forked.status_code == 201, forked.text
    fork = forked.json()["thread_id"]
    assert forked.json()["messages"] == 2
    say(client, fork, "My colour is green now.")
    shown = client.get(f"/v1/threads/{fork}").json()["messages"]
    assert [(m["index"], m["content"]) for m in shown] == [
        (0, "My colour is blue."),
        (1, "Blue noted."),
        (2, "My colour is green now."),
        (3, "Green noted."),
    ]
    assert len(client.get("/v1/threads/long").json()["messages"]) == 6  # untouched
    # Only a user's message that opened a turn can be edited this way.
    for index in (1, 9):
        refused = client.post("/v1/threads/long/fork", json={"before_message": index})
        assert refused.status_code == 404
        assert refused.json()["error"]["code"] == "checkpoint_not_found"
        assert f"message {index} is not a user's message" in refused.json()["error"]["message"]
    first = client.post("/v1/threads/long/fork", json={"before_message": 0}).json()
    assert "start a new thread" in first["error"]["message"]


def test_a_fork_is_named_apart_from_its_source_an_edit_as_edited(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    # QA: only the page renamed an edit's thread; an API or CLI fork kept its source's exact
    # title, so the two looked alike in every listing.
    fake_llm.script(Reply(content="Blue noted."), Reply(content="Blue."))
    say(client, "src", "My colour is blue.")
    say(client, "src", "What is my colour?")
    latest = client.get("/v1/threads/src/history").json()["data"][0]["checkpoint_id"]

    def fork(thread_id: str = "src", **body: Any) -> dict[str, Any]:
        made = client.post(f"/v1/threads/{thread_id}/fork", json=body)
        assert made.status_code == 201, made.text
        found: dict[str, Any] = made.json()
        return found

    base = "My colour is blue."
    edited = fork(before_message=2, edit=True)
    assert edited["title"] == f"{base} (edited)"
    assert fork(before_message=2, edit=True)["title"] == f"{base} (edited 2)"
    # An edit of an edit is numbered on from its source's name, not marked twice.
    assert fork(edited["thread_id"], before_message=2, edit=True)["title"] == f"{base} (edited 3)"
    assert fork(checkpoint_id=latest)["title"] == f"{base} (fork)"
    assert fork(checkpoint_id=latest)["title"] == f"{base} (fork 2)"
    assert fork(checkpoint_id=latest, title=" Mine ", edit=True)["title"] == "Mine"
    listed = {t["thread_id"]: t["title"] for t in client.get("/v1/threads").json()["data"]}
    assert listed[edited["thread_id"]] == f"{base} (edited)"
    assert sorted(listed.values()) == sorted(
        [
            base,
            "Mine",
            *(f"{base} (edited{n})" for n in ("", " 2", " 3")),
            *(f"{base} (fork{n})" for n in ("", " 2")),
        ]
    )
    for title in ("", "  ", "two\nlines", "x" * 201):
        refused = client.post(
            "/v1/threads/src/fork", json={"checkpoint_id": latest, "title": title}
        )
        assert refused.status_code == 400, (title, refused.text)
    # A long title keeps its mark whole, within the 200 characters a title may have.
    assert client.patch("/v1/threads/src", json={"title": "y" * 200}).status_code == 200
    long = fork(before_message=2, edit=True)["title"]
    assert (len(long), long[-9:]) == (200, " (edited)")
    # A whole number sent as a float is the integer the schema says it is (the fuzzer sent one).
    assert fork(before_message=2.0)["messages"] == 2


def test_resume_with_nothing_left_to_run_is_a_conflict(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="Hi."))
    say(client, "done", "Hello")
    response = client.post("/v1/threads/done/resume")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "nothing_to_resume"
    assert client.post("/v1/threads/nobody/resume").status_code == 404


def test_resume_of_a_thread_answering_a_message_is_refused_at_once(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    # QA: the request waited for the whole run, then said nothing_to_resume.
    import time

    fake_llm.script(Reply(content="Slow.", delay=3.0))
    started = client.post("/v1/threads/busy-r/runs", json={"message": "Hello"})
    assert started.status_code == 202, started.text
    for _ in range(200):  # until the run is at its model call
        if fake_llm.scripted_requests:
            break
        time.sleep(0.02)
    response = client.post("/v1/threads/busy-r/resume")  # before the run ends
    assert response.status_code == 409, response.text
    assert response.json()["error"]["code"] == "thread_busy"
    for _ in range(300):
        if client.get(f"/v1/threads/busy-r/runs/{started.json()['id']}").json()["status"] != (
            "running"
        ):
            break
        time.sleep(0.02)


def test_summarised_originals_go_with_a_fork_and_leave_with_the_thread(
    thread_settings: Any, fake_llm: FakeLLM
) -> None:
    summarising = thread_settings.model_copy(
        update={"summary_after_messages": 4, "summary_after_tokens": 0, "summary_keep": 2}
    )
    with TestClient(create_app(summarising)) as client:
        for n in (1, 2, 3):
            if n == 3:
                fake_llm.script(Reply(content="The user asked about orders 1 and 2 [#0 user]."))
            fake_llm.script(Reply(content=f"Order {n} shipped."))
            say(client, "long", f"Where is order {n}?")
        original = client.get("/v1/threads/long").json()
        assert original["summarised_messages"] == 2
        summarised = [m["content"] for m in original["messages"] if m.get("summarised")]
        assert summarised == ["Where is order 1?", "Order 1 shipped."]

        # Before the summary the fork has nothing summarised; after it, the originals too.
        early = client.post("/v1/threads/long/fork", json={"before_message": 4}).json()
        assert client.get(f"/v1/threads/{early['thread_id']}").json()["summarised_messages"] == 0
        forked = client.post("/v1/threads/long/fork", json={"before_message": 6}).json()
        fork = client.get(f"/v1/threads/{forked['thread_id']}").json()
        assert [(m["index"], m["content"], m.get("summarised")) for m in fork["messages"]] == [
            (0, "Where is order 1?", True),
            (1, "Order 1 shipped.", True),
            (2, "Where is order 2?", None),
            (3, "Order 2 shipped.", None),
            (4, "Where is order 3?", None),
            (5, "Order 3 shipped.", None),
        ]
        services = client.app.state.services  # type: ignore[attr-defined]
        assert client.delete("/v1/threads/long").status_code == 204
        assert client.portal is not None
        # The original's kept messages are gone with it; the fork keeps its own copy.
        assert client.portal.call(services.threads.summarised, "long", 2) == []
        kept = client.portal.call(services.threads.summarised, forked["thread_id"], 2)
        assert [i for i, _ in kept] == [0, 1]


def run_events(response: Any) -> list[tuple[str, dict[str, Any]]]:
    """The events of a streamed run's answer."""
    assert response.status_code == 200, response.text
    events = []
    for block in response.text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        events.append((lines["event"], json.loads(lines["data"])))
    return events


def test_a_fork_mid_turn_is_that_checkpoint_and_resume_runs_what_comes_next(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    usage = {"prompt_tokens": 900, "completion_tokens": 10, "total_tokens": 910}
    fake_llm.script(
        Reply(tool_calls=[ToolCall("get_order", {"order_id": "ORD1001"})], usage=usage),
        Reply(content="ORD1001 has shipped.", usage=usage),
    )
    ask = {"message": "where is my order ORD1001?", "skill": "order-lookup"}
    run_events(client.post("/v1/threads/f-src/runs/stream", json=ask))
    history = client.get("/v1/threads/f-src/history").json()["data"]
    routed = next(h for h in history if h["node"] == "route")
    assert routed["change"] == "route skill → order-lookup"
    assert routed["next"] == ["expert"]

    for fork in ("f-resumed", "f-asked"):
        forked = client.post(
            "/v1/threads/f-src/fork",
            json={"checkpoint_id": routed["checkpoint_id"], "thread_id": fork},
        )
        assert forked.status_code == 201, forked.text
        assert forked.json()["messages"] == routed["messages"] == 1
        # The fork is the checkpoint: the answer written after it is not there, nor its cost.
        shown = client.get(f"/v1/threads/{fork}").json()
        assert [m["content"] for m in shown["messages"]] == [ask["message"]]
        assert shown["usage"].get("input_tokens", 0) == 0
        assert client.get(f"/v1/threads/{fork}/history").json()["data"][0]["next"] == ["expert"]

    # Resumed, the fork runs the expert step again, as the checkpoint says comes next.
    fake_llm.script(
        Reply(tool_calls=[ToolCall("get_order", {"order_id": "ORD1001"})], usage=usage),
        Reply(content="ORD1001 is on its way.", usage=usage),
    )
    events = run_events(client.post("/v1/threads/f-resumed/resume"))
    assert events[-1][0] == "run_finished", events[-1]
    assert events[-1][1]["usage"]["input_tokens"] == 1800
    resumed = client.get("/v1/threads/f-resumed").json()["messages"]
    assert [m["role"] for m in resumed] == ["human", "ai", "tool", "ai"]
    assert resumed[-1]["content"] == "ORD1001 is on its way."

    # A new message to the other fork: no usage taken away that the run did not add.
    fake_llm.script(Reply(content="Which order?", usage=usage))
    events = run_events(client.post("/v1/threads/f-asked/runs/stream", json={"message": "Hi"}))
    assert events[-1][0] == "run_finished", events[-1]
    assert all(v >= 0 for v in events[-1][1]["usage"].values()), events[-1]
    asked = client.get("/v1/threads/f-asked").json()["messages"]
    assert "ORD1001 has shipped." not in [m["content"] for m in asked]
    # The original is untouched.
    original = client.get("/v1/threads/f-src").json()["messages"]
    assert original[-1]["content"] == "ORD1001 has shipped."
