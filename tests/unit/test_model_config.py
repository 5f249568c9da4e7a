"""Model profiles are normalised and every mistake names the profile and the setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.errors import ConfigError
from agents.models.config import load_models_config, resolve_api_key
from agents.models.gateway import ModelGateway


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "models.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_no_model_anywhere_means_no_model_mode() -> None:
    assert load_models_config(environ={}) is None


def test_default_profile_is_normalised_trailing_slash_and_key_whitespace() -> None:
    config = load_models_config(
        model=" openai/gpt-4o-mini ",
        api_base="https://api.example.com/v1/ \n",
        api_key="  sk-abc123\n",
        environ={},
    )
    assert config is not None
    profile = config.get(None)
    assert profile.model == "openai/gpt-4o-mini"
    assert profile.api_base == "https://api.example.com/v1"
    assert resolve_api_key(profile) == "sk-abc123"


def test_bare_model_name_with_a_base_url_is_openai_compatible() -> None:
    config = load_models_config(model="qwen2.5", api_base="http://127.0.0.1:11434/v1", environ={})
    assert config is not None
    assert config.get(None).litellm_model == "openai/qwen2.5"


def test_malformed_url_names_the_setting() -> None:
    with pytest.raises(ConfigError, match="SKILLDESK_MODEL_API_BASE") as info:
        load_models_config(model="openai/x", api_base="api.example.com/v1", environ={})
    assert "not an http(s) URL" in str(info.value)


def test_key_with_whitespace_inside_is_refused() -> None:
    with pytest.raises(ConfigError, match="SKILLDESK_MODEL_API_KEY"):
        load_models_config(model="openai/x", api_key="sk-abc def", environ={})


def test_profiles_file_with_key_from_environment(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
default: main
profiles:
  main: {model: deepseek/deepseek-chat, api_key_env: DEEPSEEK_KEY, fallbacks: [local]}
  local: {model: llama3, api_base: "http://127.0.0.1:11434/v1/", timeout_s: 5}
""",
    )
    config = load_models_config(models_file=path, environ={"DEEPSEEK_KEY": " sk-ds\n"})
    assert config is not None
    assert config.default == "main"
    assert resolve_api_key(config.get("main"), {"DEEPSEEK_KEY": " sk-ds\n"}) == "sk-ds"
    assert config.get("local").api_base == "http://127.0.0.1:11434/v1"
    assert config.get("main").fallbacks == ("local",)


def test_missing_key_variable_names_profile_and_variable(tmp_path: Path) -> None:
    path = write(tmp_path, "profiles:\n  default: {model: openai/x, api_key_env: MY_KEY}\n")
    with pytest.raises(ConfigError, match=r"'default'.*MY_KEY"):
        load_models_config(models_file=path, environ={})


def test_unknown_default_profile_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "default: big\nprofiles:\n  small: {model: openai/x}\n")
    with pytest.raises(ConfigError, match="'big'"):
        load_models_config(models_file=path, environ={})


def test_unknown_fallback_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "profiles:\n  default: {model: openai/x, fallbacks: [nope]}\n")
    with pytest.raises(ConfigError, match="fallback 'nope'"):
        load_models_config(models_file=path, environ={})


def test_unknown_profile_lookup_lists_known_ones() -> None:
    config = load_models_config(model="openai/x", environ={})
    assert config is not None
    with pytest.raises(ConfigError, match=r"unknown model profile 'gpt5'.*default"):
        config.get("gpt5")


def test_unknown_field_in_profile_names_it(tmp_path: Path) -> None:
    path = write(tmp_path, "profiles:\n  default: {model: openai/x, temprature: 0.2}\n")
    with pytest.raises(ConfigError, match="temprature"):
        load_models_config(models_file=path, environ={})


def test_models_file_that_is_not_yaml(tmp_path: Path) -> None:
    path = write(tmp_path, "profiles:\n  default: {model: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML") as info:
        load_models_config(models_file=path, environ={})
    first = str(info.value).splitlines()[0]  # QA: where it is came on later lines only
    assert "at line 3, column 1" in first, first


def test_a_langchain_profile_keeps_its_model_string_and_keyword_arguments(
    tmp_path: Path,
) -> None:
    path = write(
        tmp_path,
        """
profiles:
  default:
    provider: langchain
    model: "openai:gpt-5-mini"
    reasoning_effort: low
    kwargs: {use_responses_api: true, organization: org-1}
""",
    )
    config = load_models_config(models_file=path, environ={})
    assert config is not None
    profile = config.get(None)
    assert (profile.provider, profile.model) == ("langchain", "openai:gpt-5-mini")
    assert profile.kwargs == {"use_responses_api": True, "organization": "org-1"}
    assert profile.reasoning_effort == "low"


def test_keyword_arguments_without_provider_langchain_are_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "profiles:\n  default: {model: openai/x, kwargs: {a: 1}}\n")
    with pytest.raises(ConfigError, match=r"'default'.*set provider: langchain"):
        load_models_config(models_file=path, environ={})


def test_a_langchain_profile_with_a_litellm_model_string_says_how_to_write_it(
    tmp_path: Path,
) -> None:
    path = write(tmp_path, "profiles:\n  default: {provider: langchain, model: openai/x}\n")
    with pytest.raises(ConfigError, match=r"e\.g\. 'openai:gpt-5-mini'"):
        load_models_config(models_file=path, environ={})


def test_prices_are_per_million_tokens_and_never_negative(tmp_path: Path) -> None:
    path = write(
        tmp_path, "profiles:\n  default: {model: openai/x, price: {input: -1, output: 2}}\n"
    )
    with pytest.raises(ConfigError, match=r"price\.input"):
        load_models_config(models_file=path, environ={})


def test_a_node_calls_the_runs_profile_else_its_own_else_the_default(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "default: strong\nprofiles:\n  strong: {model: openai/a}\n  cheap: {model: openai/b}\n",
    )
    config = load_models_config(models_file=path, environ={}, nodes={"router": "cheap"})
    assert config is not None
    assert config.for_node("router") == "cheap"
    assert config.for_node("expert") == "strong"
    assert config.for_node("router", "strong") == "strong"  # the run named one


def test_a_node_setting_naming_no_profile_names_the_setting(tmp_path: Path) -> None:
    path = write(tmp_path, "profiles:\n  default: {model: openai/a}\n")
    with pytest.raises(ConfigError, match=r"SKILLDESK_PLANNER_PROFILE names .*'tiny'") as info:
        load_models_config(models_file=path, environ={}, nodes={"planner": "tiny"})
    assert "known profiles: default" in str(info.value)


def test_a_profiles_chain_is_its_fallbacks_depth_first_each_once(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
default: a
profiles:
  a: {model: openai/a, fallbacks: [b, c]}
  b: {model: openai/b, fallbacks: [c, d]}
  c: {model: openai/c}
  d: {model: openai/d, fallbacks: [a]}
""",
    )
    gateway = ModelGateway(load_models_config(models_file=path, environ={}))
    assert gateway.chain("a") == ["a", "b", "c", "d"]
    assert gateway.chain("d") == ["d", "a", "b", "c"]
    assert ModelGateway(None).chain("a") == []


def test_the_model_setting_beside_a_models_file_says_which_profile_it_sets(
    tmp_path: Path,
) -> None:
    # QA: SKILLDESK_MODEL silently replaced the file's `default` profile while the file made
    # `main` the default: the setting's model answered nothing, with no word of why.
    from structlog.testing import capture_logs

    path = write(
        tmp_path,
        "default: main\nprofiles:\n  main: {model: openai/gpt-4o}\n"
        "  default: {model: openai/gpt-4o-mini}\n",
    )
    with capture_logs() as logs:
        config = load_models_config(model="openai/o3", models_file=path, environ={})
    assert config is not None
    assert (config.default, config.get(None).model) == ("main", "openai/gpt-4o")
    [said] = [e for e in logs if e["event"] == "models.setting_sets_a_profile"]
    assert said["replaces_the_files"] is True
    assert "makes 'main' the default profile" in said["note"]
