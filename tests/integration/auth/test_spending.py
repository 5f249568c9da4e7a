"""A user's daily spending: what their runs cost adds up per user and UTC day (shown by
/v1/me), and past SKILLDESK_DAILY_SPEND_LIMIT_USD their new runs are refused with a 429 that
says when the budget renews; another user is not affected."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from app.main import create_app
from tests.fakellm import FakeLLM, Reply
from tests.integration.auth.conftest import bearer
from tests.integration.test_reasoning_and_cost import priced_profiles, usage


def test_past_the_daily_limit_a_user_s_runs_are_refused_and_another_user_s_are_not(
    keyed_settings: Any, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    # $2 / $10 per million tokens: 4,000 and 3,500 millionths of a dollar; limit $0.005.
    settings = keyed_settings.model_copy(
        update={
            "models_file": priced_profiles(tmp_path, fake_llm),
            "model": None,
            "daily_spend_limit_usd": 0.005,
        }
    )
    fake_llm.script(
        Reply(content="One.", usage=usage(1000, 200)),
        Reply(content="Two.", usage=usage(1500, 50)),
        Reply(content="Bob's.", usage=usage(1000, 200)),
    )
    with TestClient(create_app(settings)) as client:

        def run(who: str, thread: str) -> Any:
            return client.post(
                f"/v1/threads/{thread}/runs/stream", json={"message": "hi"}, headers=bearer(who)
            )

        assert run("alice", "a-1").status_code == 200  # 4,000 spent: under the limit
        assert client.get("/v1/me", headers=bearer("alice")).json()["spent_today_micro_usd"] == 4000
        assert run("alice", "a-1").status_code == 200  # still under when it started
        me = client.get("/v1/me", headers=bearer("alice")).json()
        assert (me["spent_today_micro_usd"], me["daily_limit_micro_usd"]) == (7500, 5000)

        refused = run("alice", "a-2")
        assert refused.status_code == 429
        error = refused.json()["error"]
        assert error["code"] == "spending_limit_reached"
        assert "midnight UTC" in error["message"]
        assert 0 < int(refused.headers["Retry-After"]) <= 86400
        chat = client.post(
            "/v1/chat/completions",
            json={"model": "skilldesk", "messages": [{"role": "user", "content": "hi"}]},
            headers=bearer("alice"),
        )
        assert chat.status_code == 429  # every way of starting a run

        assert run("bob", "b-1").status_code == 200  # bob's budget is his own
        assert client.get("/v1/me", headers=bearer("bob")).json()["spent_today_micro_usd"] == 4000
