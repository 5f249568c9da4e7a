"""The real service process (`skilldesk serve`), driven by the official openai client."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.fakellm import FakeLLM, Reply

SKILLDESK = str(Path(sys.executable).with_name("skilldesk"))
ROOT = Path(__file__).parents[2]
START_WAIT_S = 180  # for /healthz after the process starts


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Service:
    """One `skilldesk serve` process; its log lines are kept for assertions."""

    def __init__(self, env: dict[str, str], data_dir: Path) -> None:
        self.env, self.data_dir = env, data_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = data_dir.parent / f"serve-{self.port}.log"
        self._start("w")

    def restart(self) -> None:
        """Stop the process, then start another on the same port and data (a restart)."""
        self.stop()
        self._start("a")

    def _start(self, mode: str) -> None:
        self._log = self.log_path.open(mode)
        self.proc = subprocess.Popen(
            [SKILLDESK, "serve", "--port", str(self.port), "--data-dir", str(self.data_dir)],
            env=self.env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        # A first start embeds the skills: on a loaded machine (a CI run beside other test
        # suites) that took 56 s once, past a 60 s wait.
        deadline = time.monotonic() + START_WAIT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"service exited early:\n{self.log_path.read_text()}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise AssertionError(f"service did not start:\n{self.log_path.read_text()}")

    def client(self, thread_id: str) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=f"{self.url}/v1",
            api_key="unused",
            max_retries=0,
            default_headers={"X-Thread-Id": thread_id},
        )

    def logs(self) -> list[dict[str, Any]]:
        lines = self.log_path.read_text().splitlines()
        return [json.loads(line) for line in lines if line.startswith("{")]

    def stop(self) -> None:
        self.proc.terminate()  # a run under way gets its grace period (20 s by default)
        self.proc.wait(timeout=40)
        self._log.close()


@pytest.fixture
def service_env(fake_llm: FakeLLM, tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILLDESK_")}
    (tmp_path / "no-skills").mkdir(exist_ok=True)
    env["SKILLDESK_SKILLS_DIR"] = str(tmp_path / "no-skills")
    env.update(
        SKILLDESK_MODEL="openai/fake-model",
        SKILLDESK_MODEL_API_BASE=fake_llm.base_url,
        SKILLDESK_MODEL_API_KEY="sk-test\n",
        SKILLDESK_LOG_FORMAT="json",
    )
    return env


@pytest.fixture
def start_service(service_env: dict[str, str], tmp_path: Path) -> Iterator[Any]:
    started: list[Service] = []

    def start() -> Service:
        service = Service(service_env, tmp_path / "data")
        started.append(service)
        return service

    yield start
    for service in started:
        if service.proc.poll() is None:
            service.stop()


def test_openai_client_gets_streamed_and_plain_answers_that_survive_a_restart(
    start_service: Any, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    fake_llm.script(
        Reply(content="Hello from the scripted model."),
        Reply(content="Streaming works fine.", stream_chunk_delay=0.02),
        Reply(content="You said hello first."),
    )
    service = start_service()
    client = service.client("conversation-1")
    answer = client.chat.completions.create(
        model="skilldesk", messages=[{"role": "user", "content": "hello"}]
    )
    assert answer.choices[0].message.content == "Hello from the scripted model."
    assert answer.usage is not None
    assert answer.usage.total_tokens > 0

    stream = client.chat.completions.create(
        model="skilldesk",
        messages=[{"role": "user", "content": "now stream"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Streaming works fine."
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) >= 3
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.total_tokens > 0
    service.stop()
    assert (tmp_path / "data" / "skilldesk.sqlite").exists()

    restarted = start_service()
    again = restarted.client("conversation-1").chat.completions.create(
        model="skilldesk", messages=[{"role": "user", "content": "what did I say first?"}]
    )
    assert again.choices[0].message.content == "You said hello first."
    contents = [m["content"] for m in fake_llm.requests[2]["messages"]]
    assert contents[1:] == [
        "hello",
        "Hello from the scripted model.",
        "now stream",
        "Streaming works fine.",
        "what did I say first?",
    ]

    records = [r for r in restarted.logs() if r.get("event") == "run.finished"]
    assert records
    assert records[0]["thread_id"] == "conversation-1"
    assert records[0]["run_id"]
    assert records[0]["request_id"]


def test_when_every_model_fails_the_client_gets_an_actionable_error(
    start_service: Any, fake_llm: FakeLLM
) -> None:
    fake_llm.script(*[Reply(status=500)] * 3, Reply(content="recovered"))
    service = start_service()
    client = service.client("errors-1")
    with pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert info.value.status_code == 502
    assert "language model failed" in info.value.message
    ok = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert ok.choices[0].message.content == "recovered"


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"SKILLDESK_MODEL_API_BASE": "localhost:9/v1"}, "SKILLDESK_MODEL_API_BASE"),
        ({"SKILLDESK_LOG_LEVEL": "loud"}, "SKILLDESK_LOG_LEVEL"),
        ({"SKILLDESK_MODELS_FILE": "{models}", "MODELS": "default: nope\nprofiles: {}"}, "nope"),
        (
            {
                "SKILLDESK_MODELS_FILE": "{models}",
                "MODELS": "profiles:\n  big: {model: openai/x, api_key_env: BIG_KEY}",
            },
            "BIG_KEY",
        ),
    ],
)
def test_bad_configuration_stops_start_up_naming_the_setting(
    service_env: dict[str, str], tmp_path: Path, extra: dict[str, str], named: str
) -> None:
    env = dict(service_env)
    models = extra.pop("MODELS", None) if "MODELS" in extra else None
    extra = dict(extra)
    extra.pop("MODELS", None)
    if models is not None:
        path = tmp_path / "models.yaml"
        path.write_text(models, encoding="utf-8")
        extra = {k: v.replace("{models}", str(path)) for k, v in extra.items()}
    env.update(extra)
    done = subprocess.run(
        [SKILLDESK, "serve", "--port", str(free_port()), "--data-dir", str(tmp_path / "d")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert named in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_a_port_in_use_is_said_at_once_not_after_the_start_up(
    service_env: dict[str, str], tmp_path: Path
) -> None:
    # QA: a second `serve` on a port in use ran the whole start-up (12 s: skills, the store)
    # before failing to bind.
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        started = time.monotonic()
        done = subprocess.run(
            [SKILLDESK, "serve", "--port", str(port), "--data-dir", str(tmp_path / "d")],
            env={**service_env, "SKILLDESK_SKILLS_DIR": str(ROOT / "skills")},
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr, done.stderr
    assert "SKILLDESK_PORT" in done.stderr
    assert not (tmp_path / "d" / "skilldesk.sqlite").exists()  # no start-up began
    assert time.monotonic() - started < 10


def test_terminal_chat_in_process_without_a_model_says_what_to_set(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILLDESK_")}
    done = subprocess.run(
        [SKILLDESK, "chat", "--data-dir", str(tmp_path)],
        input="where is my order ORD1001?\n",  # routed: the embedding model loads
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "SKILLDESK_MODEL" in done.stdout
    assert "service.ready" not in done.stdout + done.stderr  # no log lines in the chat
    # Nothing but the conversation's header on stderr: no JSON log line repeating the
    # reply's hint, no notice of the libraries the embedding model runs on.
    [header] = done.stderr.strip().splitlines()
    assert header.startswith("thread ")


def test_terminal_chat_exits_1_when_the_service_is_unreachable() -> None:
    done = subprocess.run(
        [SKILLDESK, "chat", "--url", "http://127.0.0.1:9"],
        input="hello\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "error:" in done.stderr


def test_terminal_chat_against_a_running_service(start_service: Any, fake_llm: FakeLLM) -> None:
    fake_llm.script(Reply(content="first answer"), Reply(content="second answer"))
    service = start_service()
    done = subprocess.run(
        [SKILLDESK, "chat", "--url", service.url, "--thread", "tty-1"],
        input="one\ntwo\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["first answer", "second answer"]
    assert fake_llm.requests[1]["messages"][2]["content"] == "first answer"


def test_terminal_chat_with_a_service_that_has_keys_sends_the_one_given(
    service_env: dict[str, str], tmp_path: Path, fake_llm: FakeLLM
) -> None:
    # QA: `chat --url` sent a fixed key: once the service had keys, every message was a 401
    # blaming a key the user never gave.
    key = "sdk_ana-terminal-0123456789abcdef"
    service = Service({**service_env, "SKILLDESK_API_KEYS": f"ana:chat:{key}"}, tmp_path / "data")
    fake_llm.script(Reply(content="hello ana"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILLDESK_")}
    command = [SKILLDESK, "chat", "--url", service.url, "--thread", "tty-keyed"]
    try:
        refused = subprocess.run(
            command, input="one\ntwo\n", capture_output=True, text=True, timeout=60, env=env
        )
        done = subprocess.run(
            command,
            input="one\n",
            capture_output=True,
            text=True,
            timeout=60,
            env={**env, "SKILLDESK_API_KEY": key},
        )
        wrong = subprocess.run(
            [*command, "--api-key", "sdk_not-a-key"],
            input="one\n",
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
    finally:
        service.stop()
    assert wrong.returncode == 1
    assert f"the service at {service.url} refused the key given" in wrong.stderr
    assert "The API key is not valid." in wrong.stderr
    assert refused.returncode == 1
    assert refused.stderr.count("error:") == 1  # not once per message
    assert "needs an API key: give it with --api-key or SKILLDESK_API_KEY" in refused.stderr
    assert "not valid" not in refused.stderr  # the placeholder key is not blamed
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["hello ana"]


def test_a_service_told_to_stop_lets_its_runs_finish_in_the_grace_period(
    start_service: Any, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="Finished before leaving.", delay=1.5))
    service = start_service()
    started = httpx.post(f"{service.url}/v1/threads/grace/runs", json={"message": "hello"})
    assert started.status_code == 202
    time.sleep(0.3)  # the run waits for the model
    service.proc.send_signal(signal.SIGTERM)
    service.proc.wait(timeout=30)
    stopped = [x for x in service.logs() if x.get("event") == "service.stopped"]
    assert [x["runs_cut_off"] for x in stopped] == [0]
    # Finished, not cut off: a restart has nothing to resume (no reply is scripted for it).
    again = start_service()
    messages = httpx.get(f"{again.url}/v1/threads/grace").json()["messages"]
    assert [m["content"] for m in messages] == ["hello", "Finished before leaving."]


def test_openai_clients_of_a_stopping_service_are_told_where_the_answer_will_be(
    service_env: dict[str, str], fake_llm: FakeLLM, tmp_path: Path
) -> None:
    # QA: a run outliving the grace period left a plain-text 500, and a stream cut off with
    # no error and no [DONE]: uvicorn cancelled the requests before the runs were let go.
    fake_llm.script(
        Reply(content="never sent", delay=30),
        Reply(content=" ".join(f"w{n}" for n in range(40)), stream_chunk_delay=0.5),
    )
    service = Service({**service_env, "SKILLDESK_SHUTDOWN_GRACE_S": "1"}, tmp_path / "data")
    chat = f"{service.url}/v1/chat/completions"
    with ThreadPoolExecutor(2) as pool:
        plain = pool.submit(
            httpx.post,
            chat,
            json={"messages": [{"role": "user", "content": "plain"}]},
            headers={"X-Thread-Id": "plain"},
            timeout=30,
        )
        time.sleep(0.3)  # the first request's run takes the first (slow) reply
        body = {"messages": [{"role": "user", "content": "streamed"}], "stream": True}
        streamed = pool.submit(
            httpx.post, chat, json=body, headers={"X-Thread-Id": "streamed"}, timeout=30
        )
        deadline = time.monotonic() + 20
        while fake_llm.remaining and time.monotonic() < deadline:  # both runs ask the model
            time.sleep(0.05)
        time.sleep(1.0)  # a few words streamed
        service.proc.send_signal(signal.SIGTERM)
        plain_response, stream_response = plain.result(), streamed.result()
    service.proc.wait(timeout=30)

    assert plain_response.status_code == 503, plain_response.text
    error = plain_response.json()["error"]
    assert error["code"] == "shutting_down"
    assert "GET /v1/threads/plain" in error["message"]
    assert plain_response.headers["X-Thread-Id"] == "plain"
    assert plain_response.headers["X-Run-Id"]
    assert plain_response.headers["X-Should-Retry"] == "false"  # OpenAI's SDKs resend a 503

    assert stream_response.status_code == 200
    datas = [line[6:] for line in stream_response.text.splitlines() if line.startswith("data: ")]
    assert datas[-1] == "[DONE]"
    last = json.loads(datas[-2])["error"]
    assert last["code"] == "shutting_down"
    assert "GET /v1/threads/streamed" in last["message"]
    words = [json.loads(d)["choices"][0]["delta"].get("content") for d in datas[:-2]]
    assert "w0 " in words  # it had streamed
    stopped = [x for x in service.logs() if x.get("event") == "service.stopped"]
    assert [x["runs_cut_off"] for x in stopped] == [2]


def _idle_then_ask(url: str, idle_s: float) -> int | None:
    """One connection: a request, `idle_s` of silence, then another request on it; the
    second's status, or None when the server had closed the connection meanwhile."""
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=5)
    try:
        connection.request("GET", "/healthz")
        first = connection.getresponse()
        assert first.status == 200
        first.read()
        time.sleep(idle_s)
        try:
            connection.request("GET", "/healthz")
            return connection.getresponse().status
        except (http.client.RemoteDisconnected, ConnectionError):
            return None
    finally:
        connection.close()


def test_an_idle_connection_stays_open_as_long_as_the_keep_alive_setting_says(
    start_service: Any, service_env: dict[str, str]
) -> None:
    # Uvicorn's default (5 s) equals httpx's pool expiry: a request sent on a connection
    # idle for about 5 s met the server's close and was lost (bench/load.py saw it).
    service_env["SKILLDESK_KEEP_ALIVE_S"] = "2"
    service = start_service()
    assert _idle_then_ask(service.url, 1.0) == 200
    assert _idle_then_ask(service.url, 3.0) is None
