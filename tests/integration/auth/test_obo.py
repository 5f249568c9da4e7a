"""On-behalf-of: an agent presents a signed token naming a user; the call runs with that
user's rights and threads only, and the thread records both. Tokens that are expired,
wrongly signed, for another audience or issuer are refused; no token reaches the model,
the store or the logs."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
import structlog
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from fastapi.testclient import TestClient

from app.main import create_app
from tests.fakellm import FakeLLM, Reply
from tests.integration.auth.conftest import AUDIENCE, ISSUER, SECRET, bearer


def token(
    user: str = "alice",
    *,
    key: Any = SECRET,
    algorithm: str = "HS256",
    exp_in: float = 300,
    headers: dict[str, Any] | None = None,
    **claims: Any,
) -> str:
    """An on-behalf-of token (valid unless told otherwise)."""
    now = time.time()
    body = {"sub": user, "iss": ISSUER, "aud": AUDIENCE, "iat": int(now), "exp": int(now + exp_in)}
    body.update(claims)
    return jwt.encode(body, key, algorithm=algorithm, headers=headers)


def acting(obo: str, agent: str = "agent") -> dict[str, str]:
    """The agent's own key, and the user's token."""
    return {**bearer(agent), "X-On-Behalf-Of": obo}


def test_the_agent_acts_as_the_named_user_and_the_thread_records_both(
    keyed: TestClient, fake_llm: FakeLLM
) -> None:
    headers = acting(token("alice"))
    me = keyed.get("/v1/me", headers=headers).json()
    assert (me["user"], me["agent"]) == ("alice", "agent")
    made = keyed.post("/v1/threads", json={"title": "For alice"}, headers=headers).json()
    assert (made["owner"], made["agent"]) == ("alice", "agent")
    fake_llm.script(Reply(content="Done for alice."))
    ran = keyed.post("/v1/threads/t-obo/runs/stream", json={"message": "hi"}, headers=headers)
    assert ran.status_code == 200, ran.text
    alices = {
        t["thread_id"] for t in keyed.get("/v1/threads", headers=bearer("alice")).json()["data"]
    }
    assert alices == {made["thread_id"], "t-obo"}
    record = next(
        t
        for t in keyed.get("/v1/threads", headers=bearer("alice")).json()["data"]
        if t["thread_id"] == "t-obo"
    )
    assert (record["owner"], record["agent"]) == ("alice", "agent")
    # ...not the agent's own threads, and not bob's to see
    assert keyed.get("/v1/threads", headers=bearer("agent")).json()["data"] == []
    assert keyed.get("/v1/threads/t-obo", headers=bearer("bob")).status_code == 404
    assert keyed.get("/v1/threads/t-obo", headers=bearer("alice")).status_code == 200


def test_acting_for_bob_the_agent_cannot_reach_alices_threads(keyed: TestClient) -> None:
    made = keyed.post("/v1/threads", json={}, headers=bearer("alice")).json()["thread_id"]
    as_bob = acting(token("bob"))
    assert keyed.get(f"/v1/threads/{made}", headers=as_bob).status_code == 404
    assert keyed.get("/v1/threads", headers=as_bob).json()["data"] == []


def test_the_token_narrows_the_scopes_and_never_grants_admin(keyed: TestClient) -> None:
    chat_only = acting(token("alice", scope="chat"))
    assert keyed.get("/v1/threads", headers=chat_only).status_code == 200
    assert keyed.get("/v1/tools", headers=chat_only).status_code == 403
    by_admin = acting(token("alice", scope="chat admin"), agent="admin")
    assert keyed.get("/v1/threads?all=true", headers=by_admin).status_code == 403


def test_a_token_sent_alone_names_its_agent(keyed: TestClient) -> None:
    alone = {"Authorization": f"Bearer {token('alice', act={'sub': 'agent'})}"}
    me = keyed.get("/v1/me", headers=alone).json()
    assert (me["user"], me["agent"]) == ("alice", "agent")
    nameless = {"Authorization": f"Bearer {token('alice')}"}
    assert keyed.get("/v1/me", headers=nameless).status_code == 401


def test_a_token_sent_alone_is_no_stronger_than_beside_its_agent_s_key(
    keyed: TestClient,
) -> None:
    # QA: alone, a token without a scope claim got `approve`, which the agent's key
    # (chat, tools) never had; and an agent nobody had given a key was taken on its word.
    for claim in ({"act": {"sub": "agent"}}, {"azp": "agent"}):
        alone = {"Authorization": f"Bearer {token('alice', **claim)}"}
        me = keyed.get("/v1/me", headers=alone).json()
        beside = keyed.get("/v1/me", headers=acting(token("alice"))).json()
        assert sorted(me["scopes"]) == sorted(beside["scopes"]) == ["chat", "tools"]
    unknown = {"Authorization": f"Bearer {token('alice', azp='nobody')}"}
    refused = keyed.get("/v1/me", headers=unknown)
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "invalid_token"
    assert "agent 'nobody', which holds no API key in force" in refused.json()["error"]["message"]
    # an agent whose keys are all revoked acts for nobody either
    made = keyed.post(
        "/v1/admin/keys", json={"user": "helper-bot", "scopes": ["chat"]}, headers=bearer("admin")
    )
    assert made.status_code == 201, made.text
    helper = {"Authorization": f"Bearer {token('alice', azp='helper-bot')}"}
    assert keyed.get("/v1/me", headers=helper).json()["scopes"] == ["chat"]
    key_id = made.json()["id"]
    assert keyed.delete(f"/v1/admin/keys/{key_id}", headers=bearer("admin")).status_code == 200
    assert keyed.get("/v1/me", headers=helper).status_code == 401


@pytest.mark.parametrize(
    ("name", "bad"),
    [
        ("expired", lambda: token(exp_in=-120)),
        ("wrongly signed", lambda: token(key="another secret of thirty-two bytes or more!")),
        ("another audience", lambda: token(aud="another-service")),
        ("another issuer", lambda: token(iss="https://evil.example")),
        ("no expiry", lambda: jwt.encode({"sub": "alice", "iss": ISSUER, "aud": AUDIENCE}, SECRET)),
        ("no user", lambda: token("")),  # QA: taken as a user named "" of its own
        ("a blank user", lambda: token("  ")),
        (
            "unsigned",
            lambda: jwt.encode(
                {"sub": "alice", "iss": ISSUER, "aud": AUDIENCE, "exp": time.time() + 60},
                None,
                algorithm="none",
            ),
        ),
    ],
)
def test_a_bad_token_is_refused(keyed: TestClient, name: str, bad: Any) -> None:
    response = keyed.get("/v1/me", headers=acting(bad()))
    assert response.status_code == 401, name
    assert response.json()["error"]["code"] == "invalid_token"
    assert 'error="invalid_token"' in response.headers["WWW-Authenticate"]


def test_a_little_clock_skew_is_allowed(keyed: TestClient) -> None:
    assert keyed.get("/v1/me", headers=acting(token(exp_in=-5))).status_code == 200


def _rsa_public_key_file(tmp_path: Path) -> tuple[Any, dict[str, Any]]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    (tmp_path / "obo.pem").write_bytes(pem)
    return key, {"obo_public_key_file": tmp_path / "obo.pem", "obo_secret": None}


def _ec_jwks_file(tmp_path: Path) -> tuple[Any, dict[str, Any]]:
    key = ec.generate_private_key(ec.SECP256R1())
    jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(key.public_key()))
    (tmp_path / "jwks.json").write_text(json.dumps({"keys": [{**jwk, "kid": "k1"}]}))
    return key, {"obo_jwks_file": tmp_path / "jwks.json", "obo_secret": None}


@pytest.mark.parametrize(
    ("algorithm", "setup"), [("RS256", _rsa_public_key_file), ("ES256", _ec_jwks_file)]
)
def test_tokens_signed_with_a_key_pair_verify_with_the_public_key(
    keyed_settings: Any, tmp_path: Path, algorithm: str, setup: Any
) -> None:
    private, update = setup(tmp_path)
    settings = keyed_settings.model_copy(update=update)
    good = token(key=private, algorithm=algorithm, headers={"kid": "k1"})
    forged = token(key=SECRET)  # HS256 with the old secret: not this service's key any more
    with TestClient(create_app(settings)) as client:
        assert client.get("/v1/me", headers=acting(good)).json()["user"] == "alice"
        assert client.get("/v1/me", headers=acting(forged)).status_code == 401


def test_no_token_or_key_reaches_the_model_the_store_or_the_logs(
    keyed: TestClient, keyed_settings: Any, fake_llm: FakeLLM
) -> None:
    obo = token("alice")
    fake_llm.script(Reply(content="Fine."))
    with structlog.testing.capture_logs() as logs:
        ran = keyed.post(
            "/v1/threads/t-sec/runs/stream", json={"message": "hi"}, headers=acting(obo)
        )
        assert ran.status_code == 200
    secrets = [obo, bearer("agent")["Authorization"].split()[1]]
    logged = json.dumps(logs, default=str)
    sent = json.dumps(fake_llm.requests) + json.dumps([dict(h) for h in fake_llm.headers])
    stored = Path(keyed_settings.resolved_checkpoint_url.removeprefix("sqlite:///")).read_bytes()
    for secret in secrets:
        assert secret not in logged
        assert secret not in sent
        assert secret.encode() not in stored
