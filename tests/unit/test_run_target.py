"""What a request names to answer it: checked before any run starts."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from app.api.deps import run_target
from app.api.errors import ApiError
from app.services import Services


class TwoWorkflows:
    def match(self, text: str) -> None:
        return None

    def names(self) -> list[str]:
        return ["refund", "onboarding"]

    def get(self, name: str) -> Any:  # the registry: none of another name, none withdrawn
        from agents.errors import WorkflowNotFound

        raise WorkflowNotFound(name, self.names())


class OneSkill(dict[str, Any]):
    def not_loaded(self, name: str) -> str:  # the registry: no folder failed to load
        return ""


def services(workflows: Any) -> Services:
    return cast(
        Services,
        SimpleNamespace(
            skills=SimpleNamespace(registry=OneSkill({"order-query": object()})),
            workflows=workflows,
            workflow_registry=workflows,
            gateway=SimpleNamespace(config=SimpleNamespace(profiles={"fast": object()})),
        ),
    )


def test_an_installed_workflow_and_a_known_skill_and_profile_pass() -> None:
    target = run_target(services(TwoWorkflows()), model="fast", skill=None, workflow="refund")
    assert target == {"profile": "fast", "skill": None, "workflow": "refund"}
    target = run_target(
        services(TwoWorkflows()),
        model="gpt-4o",
        skill="order-query",
        workflow=None,
        foreign_models=True,  # chat completions': an OpenAI client's own name, the default
    )
    assert target == {"profile": None, "skill": "order-query", "workflow": None}


def test_a_model_that_names_no_profile_is_a_400_naming_the_profiles() -> None:
    with pytest.raises(ApiError) as info:
        run_target(services(TwoWorkflows()), model="gpt-4o", skill=None, workflow=None)
    assert (info.value.status, info.value.code, info.value.param) == (400, "unknown_model", "model")
    assert "no model profile named 'gpt-4o' (the profiles: fast)" in info.value.message


def test_an_unknown_workflow_names_the_installed_ones() -> None:
    with pytest.raises(ApiError) as info:
        run_target(services(TwoWorkflows()), model="x", skill=None, workflow="nope")
    assert (info.value.status, info.value.code, info.value.param) == (
        400,
        "unknown_workflow",
        "workflow",
    )
    assert "installed: onboarding, refund" in info.value.message  # sorted


def test_the_model_field_names_a_workflow_or_a_skill_for_openai_only_clients() -> None:
    found = services(TwoWorkflows())
    assert run_target(found, model="skilldesk", skill=None, workflow=None) == {
        "profile": None,
        "skill": None,
        "workflow": None,
    }
    assert run_target(found, model="skilldesk/workflow/refund", skill=None, workflow=None) == {
        "profile": None,
        "skill": None,
        "workflow": "refund",
    }
    assert run_target(found, model="skilldesk/skill/order-query", skill=None, workflow=None)[
        "skill"
    ] == ("order-query")


@pytest.mark.parametrize(
    ("model", "code"),
    [
        ("skilldesk/workflow/nope", "unknown_workflow"),
        ("skilldesk/skill/nope", "unknown_skill"),
        ("skilldesk/robot/x", "unknown_model"),
    ],
)
def test_a_target_in_the_model_field_that_is_not_installed_is_a_400_naming_model(
    model: str, code: str
) -> None:
    with pytest.raises(ApiError) as info:
        run_target(services(TwoWorkflows()), model=model, skill=None, workflow=None)
    assert (info.value.status, info.value.code, info.value.param) == (400, code, "model")
