"""A notification node posts to its webhook, retrying until the receiver takes it, and fails
the node (its on_error decides) when it never does."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from agents.models import ModelGateway
from agents.prompts import Prompts
from agents.workflows.engine import WorkflowEngine
from tests.workflowkit import Workflows


class Receiver:
    """A webhook receiver on loopback that refuses the first ``refuse`` posts."""

    def __init__(self, refuse: int) -> None:
        self.refuse = refuse
        self.bodies: list[dict[str, Any]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                receiver.bodies.append(body)
                status = 503 if len(receiver.bodies) <= receiver.refuse else 204
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"


@pytest.fixture
def receiver(request: pytest.FixtureRequest) -> Iterator[Receiver]:
    made = Receiver(request.param)
    yield made
    made.server.shutdown()


def workflow(url: str) -> str:
    return f"""
name: notify
description: Tells the team.
nodes:
  - id: tell
    kind: notify
    channel: team
    message: "Pump {{{{ run.id }}}} needs a look"
    webhook: {{url: "{url}", attempts: 3}}
    on_error: continue
    default: {{delivered: none}}
outputs: {{message: "{{{{ nodes.tell.output.delivered }}}}"}}
"""


def engine_for(url: str) -> WorkflowEngine:
    return WorkflowEngine(
        Workflows(workflow(url)),
        InMemorySaver(),
        skills=None,
        gateway=ModelGateway(None),
        prompts=Prompts(),
    )


@pytest.mark.parametrize("receiver", [2], indirect=True)
async def test_the_webhook_is_retried_until_it_is_taken(receiver: Receiver) -> None:
    record = await engine_for(receiver.url).run("notify", {})
    assert record["outputs"] == {"message": "webhook"}
    assert len(receiver.bodies) == 3
    assert receiver.bodies[-1]["message"] == f"Pump {record['id']} needs a look"


@pytest.mark.parametrize("receiver", [10], indirect=True)
async def test_a_webhook_never_taken_fails_the_node_after_its_attempts(receiver: Receiver) -> None:
    record = await engine_for(receiver.url).run("notify", {})
    assert record["outputs"] == {"message": "none"}  # on_error: continue, with its default
    assert record["nodes"]["tell"]["status"] == "failed"
    assert "did not take the notification (HTTP 503)" in record["nodes"]["tell"]["error"]
    assert len(receiver.bodies) == 3
