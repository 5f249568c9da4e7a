"""What a LangChain profile passes to its provider package unchanged: OpenAI organisation and
project headers, an Azure OpenAI deployment and API version (the conformance suite in
test_model_paths.py covers what every path shares)."""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage

from agents.models import ModelGateway, load_models_config
from tests.fakellm import FakeLLM, Reply

HELLO = [HumanMessage(content="hello")]


async def answer(tmp_path: Path, profile: str) -> str:
    path = tmp_path / "models.yaml"
    path.write_text(f"profiles:\n  default:\n{profile}", encoding="utf-8")
    env = {"AZURE_KEY": "azure-secret"}
    gateway = ModelGateway(load_models_config(models_file=path, environ=env), environ=env)
    try:
        return str((await gateway.chat_model().ainvoke(HELLO)).content)
    finally:
        await gateway.aclose()


async def test_organisation_and_project_headers_reach_openai(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="hi"))
    profile = f"""
    provider: langchain
    model: "openai:gpt-5-mini"
    api_base: {fake_llm.base_url}
    kwargs:
      use_responses_api: true
      organization: org-skilldesk
      default_headers: {{OpenAI-Project: proj_support}}
"""
    assert await answer(tmp_path, profile) == "hi"
    headers = fake_llm.headers[0]
    assert headers["openai-organization"] == "org-skilldesk"
    assert headers["openai-project"] == "proj_support"
    assert fake_llm.paths[0] == "/v1/responses"


async def test_an_azure_deployment_is_called_by_its_name_and_api_version(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="from azure"))
    endpoint = fake_llm.base_url.removesuffix("/v1")
    profile = f"""
    provider: langchain
    model: "azure_openai:support-gpt"
    api_key_env: AZURE_KEY
    kwargs:
      azure_endpoint: {endpoint}
      api_version: "2024-10-21"
"""
    assert await answer(tmp_path, profile) == "from azure"
    assert fake_llm.paths[0] == (
        "/openai/deployments/support-gpt/chat/completions?api-version=2024-10-21"
    )
    assert fake_llm.headers[0]["api-key"] == "azure-secret"


async def test_openai_without_a_key_says_so_with_the_gateways_code(tmp_path: Path) -> None:
    from agents.errors import ModelError

    profile = '    provider: langchain\n    model: "openai:gpt-5-mini"\n'
    with pytest.raises(ModelError) as info:
        await answer(tmp_path, profile)  # no OPENAI_API_KEY, no api_base: nothing is sent
    assert info.value.code == "model_auth_failed"


@pytest.mark.parametrize(
    ("model", "kwargs", "said"),
    [
        ("nosuchprov:foo", "", "Unable to infer model provider"),
        ("openai:gpt-5-mini", "\n    kwargs: {no_such_kwarg: 1}", "no_such_kwarg"),
    ],
)
async def test_a_profile_langchain_cannot_build_is_a_configuration_error_not_an_outage(
    tmp_path: Path, fake_llm: FakeLLM, model: str, kwargs: str, said: str
) -> None:
    # QA: "The language model failed ... Try again shortly" (model_unavailable), retried, for
    # a profile that can never work as written.
    from agents.errors import ModelError

    profile = (
        f'    provider: langchain\n    model: "{model}"\n    api_base: {fake_llm.base_url}'
        f"{kwargs}\n"
    )
    with pytest.raises(ModelError) as info:
        await answer(tmp_path, profile)
    assert info.value.code == "model_misconfigured"
    assert "Fix the profile in the models file" in info.value.detail
    assert said in info.value.detail
    assert fake_llm.requests == []  # nothing was sent


def test_only_a_keyword_the_model_does_not_take_is_told_as_a_profile_to_fix() -> None:
    # Review: every TypeError was `model_misconfigured`, "fix the profile": a bug reading a
    # reply too, on any transport.
    from agents.models.errors import to_model_error

    kwarg = TypeError("create() got an unexpected keyword argument 'no_such_kwarg'")
    other = TypeError("unsupported operand type(s) for +: 'NoneType' and 'int'")
    assert to_model_error(kwarg, "default", ["default"]).code == "model_misconfigured"
    assert to_model_error(other, "default", ["default"]).code == "model_unavailable"
