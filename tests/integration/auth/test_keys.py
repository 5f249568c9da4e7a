"""API keys on every door: none or a bad one is a 401 with a Bearer challenge, a key without
the scope a 403, a revoked key a 401; development mode is open on loopback only."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr
from structlog.testing import capture_logs

from agents.errors import ConfigError
from agents.state.documents import MemoryDocuments
from app.auth.keys import KIND, ApiKeys, digest, public_id
from app.main import create_app
from tests.fakellm import FakeLLM, Reply
from tests.integration.auth.conftest import KEYS, bearer
from tests.integration.test_server_process import SKILLDESK


@dataclass
class Done:
    exit_code: int
    output: str  # stdout, then stderr
    stdout: str = ""
    stderr: str = ""


def skilldesk(*args: str, settings: dict[str, str] | None = None) -> Done:
    """The command line, as a user runs it (its own process: its logging set-up stays there),
    with ``settings`` (SKILLDESK_ variables) only."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILLDESK_")}
    env.update(settings or {})
    done = subprocess.run(
        [SKILLDESK, *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    return Done(done.returncode, done.stdout + done.stderr, done.stdout, done.stderr)


def test_a_request_without_a_key_is_refused_with_a_bearer_challenge(keyed: TestClient) -> None:
    response = keyed.get("/v1/threads")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "missing_credentials"
    # The URL a client can follow, as the MCP endpoint's challenge gives it (not a path).
    assert response.headers["WWW-Authenticate"] == (
        'Bearer resource_metadata="http://testserver/.well-known/oauth-protected-resource"'
    )
    mcp = keyed.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert mcp.headers["WWW-Authenticate"] == response.headers["WWW-Authenticate"]


def test_a_wrong_key_is_refused(keyed: TestClient) -> None:
    response = keyed.get("/v1/threads", headers={"Authorization": "Bearer sdk_not-a-key-at-all"})
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_api_key"
    assert 'error="invalid_token"' in response.headers["WWW-Authenticate"]


def test_health_and_metadata_are_open_and_readyz_says_how_callers_are_checked(
    keyed: TestClient,
) -> None:
    assert keyed.get("/healthz").status_code == 200
    assert keyed.get("/readyz").json()["auth"] == "api_keys"
    metadata = keyed.get("/.well-known/oauth-protected-resource").json()
    assert metadata["resource"].endswith("/mcp")
    assert metadata["bearer_methods_supported"] == ["header"]


def test_whoami_names_the_user_and_scopes_never_the_key(keyed: TestClient) -> None:
    me = keyed.get("/v1/me", headers=bearer("alice")).json()
    assert me["user"] == "alice"
    assert me["scopes"] == ["chat", "tools"]
    assert me["key_id"].startswith("key_")
    assert "sdk_" not in str(me)


@pytest.mark.parametrize(
    ("who", "method", "path", "json"),
    [
        ("approver", "GET", "/v1/threads", None),
        ("approver", "POST", "/v1/tools/get_order/invoke", {"arguments": {}}),
        ("alice", "GET", "/v1/approvals", None),
        ("alice", "POST", "/v1/approvals/x-approve-0", {"decision": "approve"}),
        ("alice", "GET", "/v1/threads?all=true", None),
    ],
)
def test_a_key_without_the_scope_is_forbidden(
    keyed: TestClient, who: str, method: str, path: str, json: Any
) -> None:
    response = keyed.request(method, path, json=json, headers=bearer(who))
    assert response.status_code == 403, response.text
    assert response.json()["error"]["code"] == "insufficient_scope"


def test_an_admin_lists_every_users_threads_a_user_only_theirs(keyed: TestClient) -> None:
    a = keyed.post("/v1/threads", json={}, headers=bearer("alice")).json()["thread_id"]
    b = keyed.post("/v1/threads", json={}, headers=bearer("bob")).json()["thread_id"]
    mine = [
        t["thread_id"] for t in keyed.get("/v1/threads", headers=bearer("alice")).json()["data"]
    ]
    assert mine == [a]
    every = keyed.get("/v1/threads?all=true", headers=bearer("admin")).json()["data"]
    assert {t["thread_id"] for t in every} == {a, b}
    assert keyed.get(f"/v1/threads/{a}/attachments", headers=bearer("admin")).status_code == 200


def test_a_key_made_revoked_with_the_cli_stops_working(keyed_settings: Any) -> None:
    url = keyed_settings.resolved_checkpoint_url
    made = skilldesk(
        *["keys", "create", "carol", "-s", "chat", "--create", "--checkpoint-url", url]
    )
    assert made.exit_code == 0, made.output
    key_id, token = made.stdout.split()[0], made.stdout.splitlines()[1]
    listed = skilldesk(*["keys", "list", "--json", "--checkpoint-url", url])
    assert key_id in listed.output
    assert token not in listed.output
    with TestClient(create_app(keyed_settings)) as client:
        auth = {"Authorization": f"Bearer {token}"}
        assert client.get("/v1/me", headers=auth).json()["user"] == "carol"
        gone = skilldesk(*["keys", "revoke", key_id, "--checkpoint-url", url])
        assert gone.exit_code == 0, gone.output
        refused = client.get("/v1/me", headers=auth)
        assert refused.status_code == 401
        assert refused.json()["error"]["code"] == "api_key_revoked"
        assert key_id in refused.json()["error"]["message"]
    again = skilldesk(*["keys", "revoke", key_id, "--checkpoint-url", url])
    assert again.exit_code == 1
    assert f"{key_id} was revoked already" in again.output
    unknown = skilldesk(*["keys", "revoke", "key_000000000000", "--checkpoint-url", url])
    assert unknown.exit_code == 1
    assert "no key key_000000000000" in unknown.output
    ops = "sdk_ops-key-0123456789abcdef"
    settled = skilldesk(
        *["keys", "revoke", public_id(digest(ops)), "--checkpoint-url", url],
        settings={"SKILLDESK_API_KEYS": f"ops:admin:{ops}"},
    )
    assert settled.exit_code == 1
    assert "comes from SKILLDESK_API_KEYS or the keys file" in settled.output
    listed = skilldesk(*["keys", "list", "--checkpoint-url", url])
    assert f"{key_id}  carol" in listed.output
    assert "revoked " in listed.output


def test_a_key_made_to_expire_is_refused_as_expired_once_its_time_is_up(
    keyed_settings: Any,
) -> None:
    url = keyed_settings.resolved_checkpoint_url
    bad = skilldesk(*["keys", "create", "erin", "--expires-in", "soon", "--checkpoint-url", url])
    assert bad.exit_code == 2
    assert "not a duration" in bad.output
    for life in ("infd", "3651d"):  # a key that never expires is made without --expires-in
        forever = skilldesk(
            *["keys", "create", "erin", "--expires-in", life, "--checkpoint-url", url]
        )
        assert forever.exit_code == 2, forever.output
        assert "at most 3650d" in forever.output
    root = skilldesk(*["keys", "create", "erin", "-s", "root", "--checkpoint-url", url])
    assert root.exit_code == 2
    assert "unknown scope(s) root; use chat, tools, approve, admin" in root.output
    for blank in ("", "  ", " erin", "erin\t"):  # QA: a key for user "" was made and worked
        nobody = skilldesk(*["keys", "create", blank, "--checkpoint-url", url])
        assert nobody.exit_code == 2, nobody.output
        assert "is not a user id" in nobody.output
    listed = skilldesk(*["keys", "list", "--user", "erin", "--json", "--checkpoint-url", url])
    assert listed.exit_code == 2, listed.output  # nothing was made, not even the store
    assert not Path(url.removeprefix("sqlite:///")).exists()
    with TestClient(create_app(keyed_settings)) as client:
        made = skilldesk(
            *["keys", "create", "erin", "--expires-in", "4s", "--json", "--checkpoint-url", url]
        )
        assert made.exit_code == 0, made.output
        key = json.loads(made.output)
        assert key["expires"] - key["created"] == pytest.approx(4)
        auth = {"Authorization": f"Bearer {key['key']}"}
        assert client.get("/v1/me", headers=auth).json()["user"] == "erin"
        time.sleep(max(0.0, key["expires"] - time.time()) + 0.2)
        refused = client.get("/v1/me", headers=auth)
        assert refused.status_code == 401
        assert refused.json()["error"]["code"] == "api_key_expired"
        assert 'error="invalid_token"' in refused.headers["WWW-Authenticate"]


def test_keys_are_made_and_listed_in_the_data_dir_given(tmp_path: Path) -> None:
    # QA: `keys` alone of the store's commands took no --data-dir (threads does).
    here, there = str(tmp_path / "here"), str(tmp_path / "there")
    made = skilldesk(*["keys", "create", "fay", "--json", "--create", "--data-dir", here])
    assert made.exit_code == 0, made.output
    key_id = json.loads(made.stdout)["id"]
    listed = skilldesk(*["keys", "list", "--json", "--data-dir", here])
    assert [k["id"] for k in json.loads(listed.output)] == [key_id]
    elsewhere = skilldesk(*["keys", "list", "--json", "--data-dir", there])
    assert elsewhere.exit_code == 2, elsewhere.output
    assert f"{there} (--data-dir / SKILLDESK_DATA_DIR) does not exist" in elsewhere.stderr
    revoked = skilldesk(*["keys", "revoke", key_id, "--data-dir", here])
    assert revoked.exit_code == 0, revoked.output


def test_a_key_is_made_in_a_new_store_only_with_create_and_says_a_new_store_was_made(
    tmp_path: Path,
) -> None:
    # QA: a mistyped --data-dir printed a key "in force", status 0, in a new, empty store
    # that the service never reads.
    typo = tmp_path / "d1-typo"
    refused = skilldesk(
        *["keys", "create", "typo-user", "--scope", "chat", "--data-dir", str(typo)]
    )
    assert refused.exit_code == 2, refused.output
    assert refused.stderr.startswith("skilldesk: configuration error: the data folder ")
    assert f"{typo} (--data-dir / SKILLDESK_DATA_DIR) does not exist" in refused.stderr
    assert "add --create" in refused.stderr
    assert refused.stdout == ""  # no key
    assert not typo.exists()
    made = skilldesk(*["keys", "create", "new-user", "--create", "--data-dir", str(typo)])
    assert made.exit_code == 0, made.output
    assert made.stdout.splitlines()[0].endswith("for new-user (chat), in force")
    store = typo.resolve() / "skilldesk.sqlite"
    assert f"made a NEW store at {store}" in made.stderr
    assert f"`skilldesk serve --data-dir {typo.resolve()}`" in made.stderr
    again = skilldesk(*["keys", "create", "next-user", "--create", "--data-dir", str(typo)])
    assert again.exit_code == 0, again.output
    assert again.stderr == ""  # the store was there
    listed = skilldesk(*["keys", "list", "--json", "--data-dir", str(typo)])
    assert sorted(k["user"] for k in json.loads(listed.stdout)) == ["new-user", "next-user"]


def test_keys_are_stored_hashed(keyed_settings: Any) -> None:
    url = keyed_settings.resolved_checkpoint_url
    made = skilldesk(*["keys", "create", "dave", "--create", "--checkpoint-url", url])
    token = made.stdout.splitlines()[1]
    stored = keyed_settings.resolved_checkpoint_url.removeprefix("sqlite:///")
    with open(stored, "rb") as db:
        assert token.encode() not in db.read()


def test_development_mode_is_open_on_loopback_and_says_so(
    model_settings: Any, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="Hi."))
    with TestClient(create_app(model_settings)) as client:
        assert "open" in client.get("/readyz").json()["auth"]
        assert client.get("/v1/me").json()["user"] is None
        ran = client.post(
            "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]}
        )
        assert ran.status_code == 200


def test_without_keys_a_public_address_refuses_to_start_naming_the_fix(
    model_settings: Any,
) -> None:
    public = model_settings.model_copy(update={"host": "0.0.0.0"})
    with pytest.raises(ConfigError) as refused, TestClient(create_app(public)):
        pass
    assert "SKILLDESK_API_KEYS" in str(refused.value)
    assert "SKILLDESK_AUTH_DISABLED" in str(refused.value)


def test_authentication_disabled_on_a_trusted_network_starts(model_settings: Any) -> None:
    trusted = model_settings.model_copy(update={"host": "0.0.0.0", "auth_disabled": True})
    with TestClient(create_app(trusted)) as client:
        assert client.get("/readyz").json()["auth"] == "disabled"


def test_a_key_made_while_open_closes_the_service(
    model_settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("app.auth.guard.RECHECK_S", 0.0)
    with TestClient(create_app(model_settings)) as client:
        assert client.get("/v1/threads").status_code == 200
        services = client.app.state.services  # type: ignore[attr-defined]
        token, _ = client.portal.call(services.keys.create, "erin", ["chat"])  # type: ignore[union-attr]
        assert client.get("/v1/threads").status_code == 401
        assert client.get("/v1/me", headers={"Authorization": f"Bearer {token}"}).status_code == 200


def test_a_key_made_through_the_api_while_open_closes_the_service_at_once(
    model_settings: Any,
) -> None:
    # The web page: the first key it made left the service open for up to RECHECK_S.
    with TestClient(create_app(model_settings)) as client:
        made = client.post("/v1/admin/keys", json={"user": "root", "scopes": ["admin"]})
        assert made.status_code == 201, made.text
        assert client.get("/v1/threads").status_code == 401  # no wait for the next look
        assert client.get("/v1/me").status_code == 401
        signed = {"Authorization": f"Bearer {made.json()['key']}"}
        assert client.get("/v1/me", headers=signed).json()["user"] == "root"


def test_the_first_key_made_through_the_api_must_include_admin(
    model_settings: Any, tmp_path: Path
) -> None:
    # Only the web page refused it: over the API a first key without admin ended development
    # mode, and no key was left that could make or revoke keys through the API.
    with TestClient(create_app(model_settings)) as client:
        for asked in ({"user": "carol", "scopes": ["chat", "tools"]}, {"user": "carol"}):
            refused = client.post("/v1/admin/keys", json=asked)
            assert refused.status_code == 400, refused.text
            error = refused.json()["error"]
            assert (error["code"], error["param"]) == ("first_key_needs_admin", "scopes")
            assert "Include 'admin' in its scopes" in error["message"]
            assert "`skilldesk keys create USER --scope SCOPE`" in error["message"]
        assert client.get("/v1/admin/keys").json()["data"] == []  # none made: still open
        made = client.post("/v1/admin/keys", json={"user": "root", "scopes": ["chat", "admin"]})
        assert made.status_code == 201, made.text
        admin = {"Authorization": f"Bearer {made.json()['key']}"}
        later = client.post("/v1/admin/keys", json={"user": "carol"}, headers=admin)
        assert later.status_code == 201, later.text
        assert later.json()["scopes"] == ["chat"]
    trusted = model_settings.model_copy(
        update={"auth_disabled": True, "data_dir": tmp_path / "trusted"}
    )
    with TestClient(create_app(trusted)) as client:  # no development mode to end
        made = client.post("/v1/admin/keys", json={"user": "carol"})
        assert made.status_code == 201, made.text


@pytest.mark.parametrize("shared", ["memory", "redis"])
def test_over_the_rate_a_key_gets_429_with_retry_after(keyed_settings: Any, shared: str) -> None:
    update: dict[str, Any] = {"rate_limit_per_minute": 3}
    if shared == "redis":
        update["redis_url"] = "redis://127.0.0.1:6379/0"
        _flush_redis()
    _not_at_a_minute_edge()
    settings = keyed_settings.model_copy(update=update)
    with TestClient(create_app(settings)) as one, TestClient(create_app(settings)) as two:
        first = [one.get("/v1/me", headers=bearer("alice")).status_code for _ in range(2)]
        other = two if shared == "redis" else one  # Redis: the processes share the count
        third = other.get("/v1/me", headers=bearer("alice"))
        over = other.get("/v1/me", headers=bearer("alice"))
        assert [*first, third.status_code] == [200, 200, 200]
        assert over.status_code == 429
        assert over.json()["error"]["code"] == "rate_limited"
        assert 1 <= int(over.headers["Retry-After"]) <= 60
        assert other.get("/v1/me", headers=bearer("bob")).status_code == 200  # per key


def test_services_with_their_own_redis_prefix_count_apart(keyed_settings: Any) -> None:
    _not_at_a_minute_edge()
    base = {"rate_limit_per_minute": 2, "redis_url": "redis://127.0.0.1:6379/0"}
    prefix = f"rl-{uuid.uuid4().hex[:8]}"
    one = keyed_settings.model_copy(update={**base, "redis_prefix": f"{prefix}-a"})
    other = keyed_settings.model_copy(update={**base, "redis_prefix": f"{prefix}-b"})
    with TestClient(create_app(one)) as a, TestClient(create_app(other)) as b:
        assert [a.get("/v1/me", headers=bearer("alice")).status_code for _ in range(3)] == [
            200,
            200,
            429,
        ]
        assert b.get("/v1/me", headers=bearer("alice")).status_code == 200  # its own count
    import redis

    client = redis.Redis.from_url(base["redis_url"])
    assert list(client.scan_iter(f"{prefix}-a:ratelimit:*"))  # under the service's prefix
    for name in client.scan_iter(f"{prefix}-*"):
        client.delete(name)


def _flush_redis() -> None:
    import redis

    client = redis.Redis.from_url("redis://127.0.0.1:6379/0")
    for pattern in ("skilldesk:ratelimit:*", "skilldesk:tokens:*"):
        for name in client.scan_iter(pattern):
            client.delete(name)


def _not_at_a_minute_edge() -> None:
    """Counts are per minute: start a test well inside one."""
    if time.time() % 60 > 55:
        time.sleep(61 - time.time() % 60)


@pytest.mark.parametrize("shared", ["memory", "redis"])
def test_a_key_whose_runs_used_their_tokens_this_minute_gets_429(
    keyed_settings: Any, fake_llm: FakeLLM, shared: str
) -> None:
    update: dict[str, Any] = {"rate_limit_tokens_per_minute": 50}
    if shared == "redis":
        update["redis_url"] = "redis://127.0.0.1:6379/0"
        _flush_redis()
    _not_at_a_minute_edge()
    fake_llm.script(
        Reply(
            content="A long enough answer.",
            usage={"prompt_tokens": 60, "completion_tokens": 5, "total_tokens": 65},
        )
    )
    with TestClient(create_app(keyed_settings.model_copy(update=update))) as client:
        ran = client.post(
            "/v1/threads/tok-1/runs/stream", json={"message": "hi"}, headers=bearer("alice")
        )
        assert ran.status_code == 200, ran.text
        for _ in range(100):  # the count is written as the run ends
            over = client.get("/v1/me", headers=bearer("alice"))
            if over.status_code == 429:
                break
            time.sleep(0.02)
        assert over.status_code == 429
        assert over.json()["error"]["code"] == "token_rate_limited"
        assert int(over.headers["Retry-After"]) >= 1
        assert client.get("/v1/me", headers=bearer("bob")).status_code == 200


def test_a_bad_bootstrap_entry_stops_start_up_naming_it(model_settings: Any) -> None:
    bad = model_settings.model_copy(update={"api_keys": SecretStr("alice:chat")})
    with (
        pytest.raises(ConfigError, match="SKILLDESK_API_KEYS entry 1"),
        TestClient(create_app(bad)),
    ):
        pass


def test_an_admin_makes_lists_and_revokes_keys_over_the_api(keyed: TestClient) -> None:
    asked = {"user": "carol", "scopes": ["chat"], "name": "carol's laptop"}
    refused = keyed.post("/v1/admin/keys", json=asked, headers=bearer("alice"))
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "insufficient_scope"
    with capture_logs() as logs:
        made = keyed.post("/v1/admin/keys", json=asked, headers=bearer("admin"))
    assert made.status_code == 201, made.text
    assert made.headers["Cache-Control"] == "no-store"  # it carries the key
    told = next(e for e in logs if e["event"] == "auth.key_created")
    who = (told["key_id"], told["for_user"], told["by_user"])
    assert who == (made.json()["id"], "carol", "admin")
    assert made.json()["key"] not in str(logs)
    key = made.json()
    token, key_id = key["key"], key["id"]
    assert token.startswith("sdk_")
    assert key_id.startswith("key_")
    assert (key["user"], key["scopes"], key["source"], key["revoked"]) == (
        "carol",
        ["chat"],
        "store",
        None,
    )
    auth = {"Authorization": f"Bearer {token}"}
    me = keyed.get("/v1/me", headers=auth).json()
    assert (me["user"], me["scopes"], me["key_id"]) == ("carol", ["chat"], key_id)

    carols = keyed.get("/v1/admin/keys?user=carol", headers=bearer("admin"))
    assert [k["id"] for k in carols.json()["data"]] == [key_id]
    assert token not in carols.text
    every = keyed.get("/v1/admin/keys", headers=bearer("admin")).json()["data"]
    assert {k["user"] for k in every if k["source"] == "bootstrap"} == set(KEYS)

    gone = keyed.delete(f"/v1/admin/keys/{key_id}", headers=bearer("admin"))
    assert gone.status_code == 200, gone.text
    assert gone.json()["revoked"] is not None
    after = keyed.get("/v1/me", headers=auth)
    assert after.status_code == 401
    assert after.json()["error"]["code"] == "api_key_revoked"
    again = keyed.delete(f"/v1/admin/keys/{key_id}", headers=bearer("admin"))
    assert (again.status_code, again.json()["error"]["code"]) == (409, "key_revoked_already")
    unknown = keyed.delete("/v1/admin/keys/key_000000000000", headers=bearer("admin"))
    assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, "key_not_found")
    alices = next(k["id"] for k in every if k["user"] == "alice")
    settled = keyed.delete(f"/v1/admin/keys/{alices}", headers=bearer("admin"))
    assert (settled.status_code, settled.json()["error"]["code"]) == (409, "key_from_settings")
    assert keyed.get("/v1/me", headers=bearer("alice")).status_code == 200


def test_a_key_asked_for_wrongly_is_refused_naming_what_is_wrong(keyed: TestClient) -> None:
    admin = bearer("admin")
    unknown = keyed.post("/v1/admin/keys", json={"user": "dan", "scopes": ["root"]}, headers=admin)
    assert unknown.status_code == 400
    error = unknown.json()["error"]
    assert error["param"] == "scopes.0"
    assert "'chat', 'tools', 'approve' or 'admin'" in error["message"]
    for blank in ("", "   ", " dan", "dan\n"):  # QA: "   " was a user, never charged
        nobody = keyed.post("/v1/admin/keys", json={"user": blank}, headers=admin)
        assert nobody.status_code == 400, (blank, nobody.text)
        assert nobody.json()["error"]["param"] == "user"
        if blank:  # "": the field's length says it
            assert "is not a user id" in nobody.json()["error"]["message"]
    never = keyed.post("/v1/admin/keys", json={"user": "dan", "expires_in_s": 0}, headers=admin)
    assert never.status_code == 400
    assert never.json()["error"]["param"] == "expires_in_s"
    assert keyed.get("/v1/admin/keys?user=dan", headers=admin).json()["data"] == []
    for life in ("1e999", "Infinity", str(11 * 365 * 86400)):  # at most ten years
        forever = keyed.post(
            "/v1/admin/keys",
            content=f'{{"user": "dan", "expires_in_s": {life}}}',
            headers={**admin, "Content-Type": "application/json"},
        )
        assert forever.status_code == 400, (life, forever.text)
        assert forever.json()["error"]["param"] == "expires_in_s"
    assert keyed.get("/v1/admin/keys?user=dan", headers=admin).json()["data"] == []
    timed = keyed.post("/v1/admin/keys", json={"user": "dan", "expires_in_s": 3600}, headers=admin)
    made = timed.json()
    assert made["scopes"] == ["chat"]  # the default
    assert made["expires"] - made["created"] == pytest.approx(3600, abs=1)


async def test_an_old_key_is_revoked_among_ten_thousand_newer_ones() -> None:
    # Found by the start of its hash, which its public id shows: not by reading the newest
    # keys (at most ten thousand of them were read, so an old key could not be revoked).
    keys = ApiKeys(MemoryDocuments())
    token, old = await keys.create("alice", ["chat"])
    for n in range(10_000):
        body = {"id": f"key_{n:012x}", "user": "bob", "scopes": ["chat"], "sha256": f"{n:064x}"}
        await keys.documents.put(KIND, f"{n:064x}", body, owner="bob", updated=2e9 + n)
    outcome, revoked = await keys.revoke(old.id)
    assert outcome == "revoked"
    assert revoked is not None
    assert revoked.id == old.id
    found = await keys.find(token)
    assert found is not None
    assert found.revoked is not None
    assert (await keys.revoke(old.id))[0] == "revoked_already"
    assert await keys.revoke("key_../../etc") == ("unknown", None)
    assert await keys.revoke(f"key_{10_001:012x}") == ("unknown", None)


def test_keys_are_listed_a_page_at_a_time_the_settings_ones_on_the_first(
    keyed: TestClient,
) -> None:
    admin = bearer("admin")
    made, hashes = [], []
    for n in range(3):
        asked = {"user": f"user{n}", "scopes": ["chat"]}
        key = keyed.post("/v1/admin/keys", json=asked, headers=admin).json()
        made.append(key["id"])
        hashes.append(digest(key["key"]))
    listed = keyed.get("/v1/admin/keys?limit=2", headers=admin)
    assert not any(h in listed.text for h in hashes)  # the cursor shows no more than an id
    first = listed.json()
    stored = [k["id"] for k in first["data"] if k["source"] == "store"]
    assert stored == made[:0:-1]  # the newest two
    assert {k["user"] for k in first["data"] if k["source"] == "bootstrap"} == set(KEYS)
    assert first["next_cursor"] is not None
    rest = keyed.get(
        "/v1/admin/keys", params={"limit": 2, "cursor": first["next_cursor"]}, headers=admin
    ).json()
    assert [k["id"] for k in rest["data"]] == made[:1]  # the oldest; no settings' keys again
    assert rest["next_cursor"] is None
    whole = keyed.get("/v1/admin/keys", headers=admin).json()
    assert (whole["next_cursor"], len(whole["data"])) == (None, 3 + len(KEYS))
    wrong = keyed.get("/v1/admin/keys", params={"cursor": "yesterday"}, headers=admin)
    assert (wrong.status_code, wrong.json()["error"]["param"]) == (400, "cursor")
    too_many = keyed.get("/v1/admin/keys?limit=501", headers=admin)
    assert too_many.status_code == 400
    assert too_many.json()["error"]["param"] == "limit"


async def test_every_key_is_listed_from_the_command_line_past_ten_thousand() -> None:
    keys = ApiKeys(MemoryDocuments())
    for n in range(10_050):
        made = 1e9 + n // 7  # seven keys made at each instant (a bulk import)
        body = {"id": f"key_{n:012x}", "user": "bob", "scopes": ["chat"], "created": made}
        await keys.documents.put(KIND, f"{n:064x}", body, owner="bob", updated=made)
    listed = await keys.all()
    assert len(listed) == 10_050
    assert listed[0].created == 1e9 + 10_049 // 7  # newest first
    assert len({k.id for k in listed}) == 10_050  # none twice: every page after the last
