"""A workflow asked for by name that does not serve: its code and wording decided by the
error itself, so the API's handler of agents' errors says what chat, the workflow routes and
the tool server say."""

from __future__ import annotations

from agents.errors import WorkflowNotFound
from app.api.errors import api_error


def test_an_unknown_workflow_lists_the_installed_ones_sorted_wherever_it_is_answered() -> None:
    unknown = WorkflowNotFound("refnud", ["refund", "onboarding"])
    assert (unknown.code, unknown.message) == (
        "unknown_workflow",
        "no workflow named 'refnud'; did you mean 'refund'? (installed: onboarding, refund)",
    )
    error = api_error(unknown)
    assert (error.status, error.code, error.message) == (404, "unknown_workflow", unknown.message)


def test_with_none_installed_it_says_so() -> None:
    assert WorkflowNotFound("x", []).message == "no workflow named 'x' (no workflows are installed)"


def test_one_that_does_not_serve_says_why_and_lists_nothing() -> None:
    withdrawn = WorkflowNotFound("refund", ["onboarding"], "its file did not load")
    error = api_error(withdrawn)
    assert (error.status, error.code, error.message) == (
        404,
        "workflow_unavailable",
        "workflow 'refund' is not available: its file did not load",
    )
