"""Learned examples are every user's words: only an admin lists or deletes them."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.integration.auth.conftest import bearer

EXAMPLES = "/v1/skills/order-lookup/examples"


def test_only_an_admin_lists_or_deletes_learned_examples(keyed: TestClient) -> None:
    for who in ("alice", "approver"):
        listed = keyed.get(EXAMPLES, headers=bearer(who))
        assert listed.status_code == 403, listed.text
        deleted = keyed.delete(f"{EXAMPLES}/e-1", headers=bearer(who))
        assert deleted.status_code == 403, deleted.text
    listed = keyed.get(EXAMPLES, headers=bearer("admin"))
    assert listed.status_code == 200, listed.text
    assert listed.json()["data"] == []
    assert keyed.delete(f"{EXAMPLES}/e-1", headers=bearer("admin")).status_code == 404
