"""Attachments: an upload checked and stored, served back, referenced (never pasted) in the
prompt; a WAV the text-to-speech skill makes becomes an attachment the client can fetch."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from tests.fakellm import FakeLLM, Reply, ToolCall
from tests.integration.threads.conftest import say
from tests.skillkit import tool, write_skill

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
SKILLS = Path(__file__).resolve().parents[3] / "skills"


def test_an_upload_is_stored_served_and_shown_to_the_model_by_reference(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="Hi."))
    say(client, "files", "Hello")
    upload = client.post(
        "/v1/threads/files/attachments",
        files={"file": ("plan.png", PNG, "image/png")},
        data={"caption": "floor plan of hall 3"},
    )
    assert upload.status_code == 201, upload.text
    body = upload.json()
    assert (body["kind"], body["name"], body["size"], body["media_type"]) == (
        "upload",
        "plan.png",
        len(PNG),
        "image/png",
    )
    fetched = client.get(body["url"])
    assert fetched.status_code == 200
    assert fetched.content == PNG
    assert fetched.headers["content-type"] == "image/png"
    thread = client.get("/v1/threads/files").json()
    assert [a["id"] for a in thread["attachments"]] == [body["id"]]
    assert [a["id"] for a in client.get("/v1/threads/files/attachments").json()] == [body["id"]]

    fake_llm.script(Reply(content="I see the plan."))
    say(client, "files", "What did I attach?")
    system = fake_llm.requests[-1]["messages"][0]["content"]
    assert "plan.png" in system
    assert "floor plan of hall 3" in system
    assert "PNG" not in json.dumps(fake_llm.requests[-1])  # the bytes never reach a prompt


def test_a_file_name_with_quotes_and_line_breaks_is_kept_as_the_browser_named_it(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="Hi."))
    say(client, "names", "Hello")
    # As browsers send it (WHATWG HTML's multipart/form-data encoding): `"` as %22, CR as
    # %0D, LF as %0A, nothing else escaped, so a % of the name itself comes as it is.
    sent = "bad %22name%22 <x> 100%25 %0D%0Aend.txt"
    body = (
        b"--cut\r\n"
        b'Content-Disposition: form-data; name="file"; filename="' + sent.encode() + b'"\r\n'
        b"Content-Type: text/plain\r\n\r\n"
        b"Some notes.\r\n"
        b"--cut--\r\n"
    )
    upload = client.post(
        "/v1/threads/names/attachments",
        content=body,
        headers={"Content-Type": "multipart/form-data; boundary=cut"},
    )
    assert upload.status_code == 201, upload.text
    assert upload.json()["name"] == 'bad "name" <x> 100%25 \r\nend.txt'
    listed = client.get("/v1/threads/names/attachments").json()
    assert [a["name"] for a in listed] == ['bad "name" <x> 100%25 \r\nend.txt']


def test_a_file_name_too_long_for_the_parser_is_named_as_the_cause(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="Hi."))
    say(client, "long", "Hello")
    upload = client.post(
        "/v1/threads/long/attachments",
        files={"file": ("a" * 5000 + ".txt", b"notes", "text/plain")},
    )
    assert upload.status_code == 400, upload.text
    error = upload.json()["error"]
    assert error["code"] == "invalid_multipart"
    assert "header" in error["message"]
    assert "file name" in error["message"]
    assert "4,224 bytes" in error["message"]  # the limit, so the client knows what fits
    assert client.get("/v1/threads/long/attachments").json() == []
    # The thread is as it was: the next turn is served.
    fake_llm.script(Reply(content="Still here."))
    say(client, "long", "Hello again")
    texts = [m["content"] for m in client.get("/v1/threads/long").json()["messages"]]
    assert texts == ["Hello", "Hi.", "Hello again", "Still here."]


@pytest.mark.parametrize(
    ("name", "content", "media_type", "status", "code"),
    [
        ("fake.png", b"%PDF-1.7 not a png", "image/png", 415, "media_type_mismatch"),
        ("tool.exe", b"MZ\x90\x00", "application/x-msdownload", 415, "unsupported_media_type"),
        ("bin.txt", b"\x00\x01\x02 binary", "text/plain", 415, "media_type_mismatch"),
        ("big.txt", b"x" * 2048, "text/plain", 413, "attachment_too_large"),
    ],
)
def test_a_refused_upload_says_why_and_leaves_nothing(
    model_settings: Any,
    store_url: str,
    fake_llm: FakeLLM,
    name: str,
    content: bytes,
    media_type: str,
    status: int,
    code: str,
) -> None:
    settings = model_settings.model_copy(
        update={"checkpoint_url": store_url, "attachment_max_bytes": 1024}
    )
    with TestClient(create_app(settings)) as client:
        fake_llm.script(Reply(content="Hi."))
        say(client, "refused", "Hello")
        response = client.post(
            "/v1/threads/refused/attachments", files={"file": (name, content, media_type)}
        )
        assert response.status_code == status
        assert response.json()["error"]["code"] == code
        if code == "attachment_too_large":  # in words, not the operator's setting
            message = response.json()["error"]["message"]
            assert "larger than 1 KB (1,024 bytes), the most this service takes" in message
            assert "SKILLDESK_" not in message
        assert client.get("/v1/threads/refused").json()["attachments"] == []
        folder = settings.data_dir / "attachments" / "refused"
        assert not folder.exists() or not any(folder.iterdir())
    missing = "/v1/threads/nobody/attachments"
    with TestClient(create_app(settings)) as client:
        assert (
            client.post(missing, files={"file": ("a.txt", b"a", "text/plain")}).status_code == 404
        )
        assert client.get("/v1/threads/refused/attachments/att_0000").status_code == 404


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="needs espeak-ng (CI installs it)")
def test_the_speech_skill_s_wav_is_an_attachment_fetched_over_http(
    model_settings: Any, store_url: str, tmp_path: Path, fake_llm: FakeLLM
) -> None:
    skills = tmp_path / "skills"
    shutil.copytree(SKILLS / "text-to-speech", skills / "text-to-speech")
    settings = model_settings.model_copy(update={"checkpoint_url": store_url, "skills_dir": skills})
    fake_llm.script(
        Reply(tool_calls=[ToolCall("synthesize_speech", {"text": "The line restarts at noon."})]),
        Reply(content="Here is the audio."),
    )
    with TestClient(create_app(settings)) as client:
        response = client.post(
            "/v1/threads/speech/runs/stream",
            json={"message": "Read aloud: the line restarts at noon.", "skill": "text-to-speech"},
        )
        assert response.status_code == 200
        returned = next(
            json.loads(block.split("data: ", 1)[1])
            for block in response.text.split("\n\n")
            if block.startswith("event: tool_returned")
        )
        result = json.loads(returned["content"])
        assert "path" not in result  # a server path means nothing to the model or user
        (made,) = result["files"]
        thread = client.get("/v1/threads/speech").json()
        (attachment,) = thread["attachments"]
        assert attachment["id"] == made["id"]
        assert attachment["kind"] == "generated"
        assert attachment["media_type"] == "audio/wav"
        assert attachment["caption"].startswith("Speech (en)")
        wav = client.get(attachment["url"])
        assert wav.status_code == 200
        assert wav.headers["content-type"] == "audio/wav"
        assert wav.content[:4] == b"RIFF"
        assert wav.content[8:12] == b"WAVE"
        assert len(wav.content) == attachment["size"]


REPORT = """
from pathlib import Path


def make_report(context):
    path = Path(context.data_dir) / "report.txt"
    path.write_text("all clear")
    return {"files": [{"path": str(path), "caption": "Shift report"}]}
"""


def test_a_file_a_workflow_tool_made_for_a_thread_is_listed_with_the_thread(
    model_settings: Any, tmp_path: Path
) -> None:
    # QA: listed by /attachments and fetched, but the thread showed "attachments": [].
    skills, workflows = tmp_path / "skills", tmp_path / "workflows"
    write_skill(
        skills,
        "reports",
        config={"tools": [tool("make_report", "handler:make_report")]},
        handler=REPORT,
    )
    workflows.mkdir()
    (workflows / "report.yaml").write_text(
        "name: report\ndescription: Write the shift report.\n"
        "nodes:\n  - id: write\n    kind: tool\n    tool: make_report\n"
    )
    settings = model_settings.model_copy(update={"skills_dir": skills, "workflows_dir": workflows})
    with TestClient(create_app(settings)) as client:
        body = {"inputs": {}, "thread_id": "shift"}
        record = client.post("/v1/workflows/report/runs", json=body).json()
        assert record["status"] == "SUCCEEDED", record
        (listed,) = client.get("/v1/threads/shift/attachments").json()
        (shown,) = client.get("/v1/threads/shift").json()["attachments"]
        assert shown == listed
        assert (shown["kind"], shown["caption"]) == ("generated", "Shift report")
        assert client.get(shown["url"]).content == b"all clear"


def test_an_upload_that_is_not_multipart_says_how_to_send_the_file(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    # QA: a JSON body got "file: Field required", which says nothing of how to send a file.
    fake_llm.script(Reply(content="Hi."))
    say(client, "sent", "Hello")
    as_json = client.post("/v1/threads/sent/attachments", json={"file": "plan.png"})
    assert as_json.status_code == 400, as_json.text
    error = as_json.json()["error"]
    assert (error["code"], error["param"]) == ("invalid_content_type", "file")
    assert error["message"] == (
        "The upload came with Content-Type 'application/json': send it as multipart/form-data "
        "with the file in the `file` field (curl: -F file=@path/to/file, and -F caption=... "
        "for a caption)."
    )
    elsewhere = client.post(
        "/v1/threads/sent/attachments", files={"upload": ("plan.png", PNG, "image/png")}
    )
    assert elsewhere.status_code == 400, elsewhere.text
    assert elsewhere.json()["error"]["param"] == "file"
    assert "`file` field is missing" in elsewhere.json()["error"]["message"]
    as_text = client.post(
        "/v1/threads/sent/attachments", data={"file": "plan.png"}, files={"x": ("x", b"")}
    )
    assert "`file` field holds text, not a file" in as_text.json()["error"]["message"]
    assert client.get("/v1/threads/sent/attachments").json() == []
