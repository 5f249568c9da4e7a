"""An app with API keys: alice and bob (chat, tools), an approver, an admin, an agent; the
storefront's order lookup and a workflow that waits for an approval."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from app.main import create_app
from tests.skillkit import copy_fixture_skill

KEYS = {
    "alice": "sdk_alice-key-0123456789abcdef",
    "bob": "sdk_bob-key-0123456789abcdef00",
    "approver": "sdk_approver-key-0123456789ab",
    "admin": "sdk_admin-key-0123456789abcdef",
    "agent": "sdk_agent-key-0123456789abcdef",
}
SCOPES = {
    "alice": "chat,tools",
    "bob": "chat,tools",
    "approver": "approve",
    "admin": "admin",
    "agent": "chat,tools",
}
LOOKUP = """
name: lookup
description: Looks an order up; a person approves.
inputs: {order_id: {type: string}}
nodes:
  - {id: order, kind: tool, tool: get_order, arguments: {order_id: "{{ inputs.order_id }}"}}
  - {id: ok, kind: approval, summary: "Order {{ nodes.order.output.order_id }}?"}
outputs: {message: "{{ nodes.order.output.status }}"}
"""
SECRET = "an obo secret of at least thirty-two bytes, for HS256"
ISSUER, AUDIENCE = "https://idp.example", "skilldesk"


def bearer(who: str) -> dict[str, str]:
    """The Authorization header of one of the keys."""
    return {"Authorization": f"Bearer {KEYS[who]}"}


def keys_setting() -> str:
    return " ".join(f"{who}:{SCOPES[who]}:{KEYS[who]}" for who in KEYS)


@pytest.fixture
def keyed_settings(model_settings: Any, tmp_path: Path) -> Any:
    """Settings with the keys, on-behalf-of tokens (HS256), one skill and one workflow."""
    skills, workflows = tmp_path / "skills", tmp_path / "workflows"
    copy_fixture_skill(skills, "storefront/order-lookup")
    workflows.mkdir()
    (workflows / "lookup.yaml").write_text(LOOKUP)
    return model_settings.model_copy(
        update={
            "skills_dir": skills,
            "workflows_dir": workflows,
            "retention_interval_s": 0,
            "api_keys": SecretStr(keys_setting()),
            "obo_issuer": ISSUER,
            "obo_audience": AUDIENCE,
            "obo_secret": SecretStr(SECRET),
        }
    )


@pytest.fixture
def keyed(keyed_settings: Any) -> Iterator[TestClient]:
    with TestClient(create_app(keyed_settings)) as client:
        yield client
