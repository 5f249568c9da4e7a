"""What the command line prints of runs and of the commands it suggests."""

from __future__ import annotations

from pathlib import Path

from app.cli.approval_views import run_view
from app.cli.workflows import ending, store_flags

WAITING = {
    "id": "r1",
    "workflow": "refund-request",
    "version": 1,
    "thread_id": None,
    "status": "WAITING",
    "started": 1.0,
    "ended": None,
    "inputs": {},
    "outputs": {},
    "error": None,
    "nodes": {},
    "waiting": {"approval_id": "r1-approve-0", "node": "approve", "summary": "Refund?"},
    "fingerprint": "f" * 64,
    "checkpoint": "c1",
}


def test_suggested_commands_repeat_the_store_never_a_password() -> None:
    url = "postgresql://svc:S3cret@db.example:5432/skilldesk"
    flags = store_flags(Path("/srv/data"), url)
    # Quoted for the shell: the stars are no glob.
    redacted = "'postgresql://svc:***@db.example:5432/skilldesk'"
    assert flags == f" --data-dir /srv/data --checkpoint-url {redacted}"
    assert "S3cret" not in ending(WAITING, flags)
    assert "`skilldesk approvals approve r1-approve-0" + flags + "`" in ending(WAITING, flags)
    plain = "postgresql://svc@db/skilldesk"
    assert store_flags(None, plain) == f" --checkpoint-url {plain}"
    assert store_flags(None) == ""


def test_a_run_is_shown_without_its_bookkeeping_even_when_the_model_refuses_it() -> None:
    shown = run_view(WAITING)
    assert "fingerprint" not in shown
    assert "checkpoint" not in shown
    assert shown["waiting"]["approval_id"] == "r1-approve-0"
    odd = {**WAITING, "started": "yesterday"}  # a record the API's model refuses
    shown = run_view(odd)
    assert shown["started"] == "yesterday"
    assert "fingerprint" not in shown
