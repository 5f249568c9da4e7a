"""A field a run's record drops is gone once stored, alike in memory, in the SQLite file and on
PostgreSQL: a merge removes a field changed to ``REMOVED``, and a conditional save of a record
(``RunRecords.save_if``) stores it as it is, not with its dropped fields null."""

from __future__ import annotations

import time
from typing import Any

from agents.state.documents import REMOVED, Documents
from agents.workflows.leases import RunLeases
from agents.workflows.records import RUN, RunRecords
from app.api.schemas.workflows import RunPublic
from tests.integration.test_documents import documents  # noqa: F401  (a fixture)


async def test_a_merge_removes_a_field_changed_to_removed(documents: Documents) -> None:  # noqa: F811
    await documents.put("run", "r", {"a": 1, "b": 2, "c": None}, status="RUNNING")
    written = await documents.merge("run", "r", {"a": REMOVED, "d": 4})
    assert written == {"b": 2, "c": None, "d": 4}
    assert await documents.get("run", "r") == written
    replaced = await documents.merge("run", "r", lambda d: {k: REMOVED for k in d} | {"e": 5})
    assert replaced == {"e": 5}
    assert await documents.get("run", "r") == {"e": 5}
    assert await documents.merge("run", "r", {"gone": REMOVED}) == {"e": 5}  # none: no matter


def _running(run_id: str) -> dict[str, Any]:
    return {
        "id": run_id,
        "workflow": "lookup",
        "version": 1,
        "thread_id": None,
        "user": None,
        "parent": None,
        "status": "RUNNING",
        "started": time.time(),
        "ended": None,
        "inputs": {},
        "outputs": {},
        "error": None,
        "nodes": {},
        "waiting": None,
    }


async def test_a_conditional_save_drops_the_fields_the_record_dropped(
    documents: Documents,  # noqa: F811
) -> None:
    # QA: save_if wrote None for every field the record no longer had: a run stored with
    # cancel_requested came back `cancel_requested: null`, which the API's bool refuses.
    runs = RunRecords(documents, RunLeases(None))
    stored = {**_running("r1"), "cancel_requested": True, "decided": {"by": "ann"}}
    await documents.put(RUN, "r1", stored, status="RUNNING")
    ended = {**_running("r1"), "status": "CANCELLED", "error": "cancelled by ann"}
    assert await runs.save_if(ended, lambda s: s["status"] == "RUNNING") is None
    record = await runs.stored("r1")
    assert "cancel_requested" not in record
    assert "decided" not in record
    assert record == ended
    assert RunPublic.model_validate(record).cancel_requested is False
    # Refused, it writes nothing: the record as stored comes back.
    again = {**ended, "error": "twice"}
    assert await runs.save_if(again, lambda s: s["status"] == "RUNNING") == record
    assert (await runs.stored("r1"))["error"] == "cancelled by ann"
