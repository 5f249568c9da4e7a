"""The HTTP API's view of a workflow run's record."""

from __future__ import annotations

from app.api.schemas.workflows import RunPublic

RECORD = {
    "id": "r1",
    "workflow": "refund-request",
    "version": 1,
    "thread_id": None,
    "status": "CANCELLED",
    "started": 1.0,
    "ended": 2.0,
    "inputs": {},
    "outputs": {},
    "error": "cancelled by alice",
    "nodes": {},
    "waiting": None,
}


def test_a_record_stored_with_a_null_cancel_request_reads_as_none_asked() -> None:
    # Conditional saves before 2026-12-07 wrote a dropped field as null.
    assert RunPublic.model_validate({**RECORD, "cancel_requested": None}).cancel_requested is False
    assert RunPublic.model_validate({**RECORD, "cancel_requested": True}).cancel_requested is True
    assert RunPublic.model_validate(RECORD).cancel_requested is False
