"""Thread records: listed newest first without reading checkpoints, titled from the first
message, renamed, created empty, paginated, deleted with everything they hold."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from fastapi.testclient import TestClient

from agents.state.records import ThreadRecords
from app.main import create_app
from tests.fakellm import FakeLLM, Reply
from tests.integration.runs.test_runs_api import wait_for
from tests.integration.threads.conftest import say
from tests.pgkit import REDIS, schema_url


def test_threads_are_listed_newest_first_with_titles_from_their_first_message(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="Hi."), Reply(content="Hello."), Reply(content="Sure."))
    say(client, "a", "Hello there, can you help me plan a long trip around the coast of Norway?")
    say(client, "b", "Short one")
    say(client, "a", "Second message")

    listing = client.get("/v1/threads").json()
    assert [t["thread_id"] for t in listing["data"]] == ["a", "b"]  # a was updated last
    first = listing["data"][0]
    assert first["title"] == "Hello there, can you help me plan a long trip around the…"
    assert (first["messages"], first["status"]) == (4, "idle")
    assert listing["data"][1]["title"] == "Short one"
    assert listing["has_more"] is False

    page = client.get("/v1/threads", params={"limit": 1}).json()
    assert [t["thread_id"] for t in page["data"]] == ["a"]
    assert page["has_more"] is True
    rest = client.get("/v1/threads", params={"limit": 1, "cursor": page["next_cursor"]}).json()
    assert [t["thread_id"] for t in rest["data"]] == ["b"]
    assert (rest["has_more"], rest["next_cursor"]) == (False, None)
    bad = client.get("/v1/threads", params={"cursor": "yesterday"})
    assert bad.status_code == 400
    assert bad.json()["error"]["param"] == "cursor"


def test_threads_saved_at_the_same_instant_are_paged_once_each(client: TestClient) -> None:
    # Pages by time alone (`before`) skipped the threads of a page's last instant that did
    # not fit on it; the cursor carries the id too.
    services = client.app.state.services  # type: ignore[attr-defined]
    documents = services.threads.records.documents
    ids = [f"tie-{n}" for n in range(7)]

    async def save() -> None:
        for thread_id in ids:
            body = {"thread_id": thread_id, "title": thread_id, "created": 1e9, "updated": 1e9}
            await documents.put(
                "thread", thread_id, {**body, "status": "idle", "messages": 0}, updated=1e9
            )

    client.portal.call(save)  # type: ignore[union-attr]
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 3, **({"cursor": cursor} if cursor else {})}
        page = client.get("/v1/threads", params=params).json()
        seen += [t["thread_id"] for t in page["data"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == ids  # each once


def test_a_thread_is_created_empty_renamed_and_named_by_its_first_message(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    created = client.post("/v1/threads", json={})
    assert created.status_code == 201
    thread_id = created.json()["thread_id"]
    assert created.json()["title"] == "New conversation"
    assert client.post("/v1/threads", json={"thread_id": thread_id}).status_code == 409
    empty = client.get(f"/v1/threads/{thread_id}")  # made, nothing said yet: not a 404
    assert empty.status_code == 200, empty.text
    assert (empty.json()["messages"], empty.json()["title"]) == ([], "New conversation")

    fake_llm.script(Reply(content="Hi."))
    say(client, thread_id, "Where is my parcel?")
    assert client.get("/v1/threads").json()["data"][0]["title"] == "Where is my parcel?"

    renamed = client.patch(f"/v1/threads/{thread_id}", json={"title": "Parcel"})
    assert renamed.status_code == 200
    assert renamed.json()["title"] == "Parcel"
    assert client.get("/v1/threads").json()["data"][0]["title"] == "Parcel"
    assert client.get(f"/v1/threads/{thread_id}").json()["title"] == "Parcel"  # the page's header
    assert client.patch(f"/v1/threads/{thread_id}", json={"title": "  "}).status_code == 400
    assert client.patch("/v1/threads/nope", json={"title": "x"}).status_code == 404


def test_a_thread_id_in_use_is_refused_naming_the_field_that_asked_for_it(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    # QA: the 409 `thread_exists` had `param: null`.
    fake_llm.script(Reply(content="Hi."))
    say(client, "taken", "Hello")
    latest = client.get("/v1/threads/taken/history").json()["data"][0]["checkpoint_id"]
    fork = {"checkpoint_id": latest, "thread_id": "taken"}
    for path, body in (("/v1/threads", {"thread_id": "taken"}), ("/v1/threads/taken/fork", fork)):
        refused = client.post(path, json=body)
        assert refused.status_code == 409, refused.text
        error = refused.json()["error"]
        assert (error["code"], error["param"]) == ("thread_exists", "thread_id")
        assert error["message"] == (
            "The thread id 'taken' is taken: send another `thread_id`, or none and the "
            "service chooses one."
        )


def test_deleting_a_thread_removes_its_checkpoints_record_and_files(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="Noted."), Reply(content="Other."))
    say(client, "doomed", "Remember this.")
    say(client, "kept", "Another thread.")
    upload = client.post(
        "/v1/threads/doomed/attachments",
        files={"file": ("notes.txt", b"some notes", "text/plain")},
    )
    assert upload.status_code == 201
    url = upload.json()["url"]
    assert client.get(url).status_code == 200

    assert client.delete("/v1/threads/doomed").status_code == 204

    assert client.get("/v1/threads/doomed").status_code == 404
    assert client.get("/v1/threads/doomed/history").status_code == 404
    assert client.get(url).status_code == 404
    assert [t["thread_id"] for t in client.get("/v1/threads").json()["data"]] == ["kept"]
    services = client.app.state.services  # type: ignore[attr-defined]
    folder = services.attachments.options.directory / "doomed"
    assert not folder.exists()
    assert client.delete("/v1/threads/doomed").status_code == 404
    # The other thread is untouched.
    assert [m["content"] for m in client.get("/v1/threads/kept").json()["messages"]] == [
        "Another thread.",
        "Other.",
    ]


async def test_two_callers_making_one_new_thread_at_once_agree_on_its_owner(
    model_settings: Any, monkeypatch: Any
) -> None:
    # A workflow started on a new thread makes it for its caller (``Threads.ensure``); two
    # users naming the same new id at once both wrote the record (the last one owning it),
    # and each went on as if the thread were theirs: one's outcome was told in the other's.
    import asyncio

    from app.services import open_services

    async with open_services(model_settings) as services:
        threads = services.threads
        exists = threads.exists

        async def slow_exists(thread_id: str) -> bool:
            found = await exists(thread_id)
            await asyncio.sleep(0.05)  # both look before either writes
            return found

        monkeypatch.setattr(threads, "exists", slow_exists)
        owners = await asyncio.gather(
            threads.ensure("shared", owner="alice", title="Workflow a"),
            threads.ensure("shared", owner="bob", title="Workflow b"),
        )
        record = await threads.records.get("shared")
    assert record is not None
    assert owners == [record["owner"], record["owner"]]


def test_a_new_threads_run_once_accepted_finds_its_thread_there(
    client: TestClient, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without API keys no request claimed a new thread: its run made the record, after the
    # 202, and the client's next request could be a 404 (QA; with the store slower than
    # here: made slow here). The runs API's request makes it now, with keys or without.
    _new_threads_are_there_once_accepted(client, fake_llm, monkeypatch)


def test_with_redis_a_new_threads_run_once_accepted_finds_its_thread_there(
    model_settings: Any, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With Redis a run's begin goes through a Redis script before the run is marked started:
    # another path from the request to the run than the one above.
    with schema_url() as url:
        update = {"checkpoint_url": url, "redis_url": REDIS, "retention_interval_s": 0}
        with TestClient(create_app(model_settings.model_copy(update=update))) as client:
            _new_threads_are_there_once_accepted(client, fake_llm, monkeypatch)


def _new_threads_are_there_once_accepted(
    client: TestClient, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    create = ThreadRecords.create

    async def slow_create(self: ThreadRecords, *args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(0.3)
        return await create(self, *args, **kwargs)

    monkeypatch.setattr(ThreadRecords, "create", slow_create)
    fake_llm.script(*[Reply(content="Noted.", delay=0.2) for _ in range(3)])
    runs = []
    for n in range(3):
        made = client.post(f"/v1/threads/r-new-{n}/runs", json={"message": "my size is 42"})
        assert made.status_code == 202, made.text
        runs.append(made.json())
        thread = client.get(f"/v1/threads/r-new-{n}")
        assert thread.status_code == 200, (n, thread.text)
        assert thread.json()["thread_id"] == f"r-new-{n}"
    for n, run in enumerate(runs):
        assert wait_for(client, f"r-new-{n}", run["id"], "succeeded")["answer"] == "Noted."
