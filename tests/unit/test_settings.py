"""Settings come from SKILLDESK_* and an optional YAML file; mistakes name the setting."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from agents.errors import ConfigError
from app.settings import Settings, load_settings

# Both ways in: the model itself (tests, embedding code) and the loader of the CLI and app.
BUILDERS = [pytest.param(Settings, id="Settings"), pytest.param(load_settings, id="load_settings")]


def test_environment_prefix_sets_values(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SKILLDESK_PORT", "9001")
    monkeypatch.setenv("SKILLDESK_DATA_DIR", str(tmp_path))
    settings = load_settings()
    assert settings.port == 9001
    assert settings.resolved_checkpoint_url == f"sqlite:///{tmp_path.resolve()}/skilldesk.sqlite"


def test_yaml_config_file_is_read_and_environment_wins(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = tmp_path / "skilldesk.yaml"
    config.write_text("port: 8100\nhost: 0.0.0.0\nlog_format: JSON\n", encoding="utf-8")
    monkeypatch.setenv("SKILLDESK_CONFIG_FILE", str(config))
    monkeypatch.setenv("SKILLDESK_PORT", "8200")
    settings = load_settings()
    assert (settings.host, settings.port, settings.log_format) == ("0.0.0.0", 8200, "json")


@pytest.mark.parametrize("build", BUILDERS)
def test_config_file_argument_is_read_below_arguments_and_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, build: Callable[..., Settings]
) -> None:
    config = tmp_path / "skilldesk.yaml"
    config.write_text("port: 8100\nhost: 0.0.0.0\nlog_level: debug\n", encoding="utf-8")
    monkeypatch.setenv("SKILLDESK_PORT", "8200")
    settings = build(config_file=config, host="127.0.0.3")
    assert (settings.host, settings.port, settings.log_level) == ("127.0.0.3", 8200, "debug")
    assert settings.config_file == config


def test_config_file_argument_replaces_the_variables_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from_variable = tmp_path / "variable.yaml"
    from_variable.write_text("port: 8300\nlog_level: error\n", encoding="utf-8")
    from_argument = tmp_path / "argument.yaml"
    from_argument.write_text("port: 8400\n", encoding="utf-8")
    monkeypatch.setenv("SKILLDESK_CONFIG_FILE", str(from_variable))
    settings = Settings(config_file=from_argument)
    assert (settings.port, settings.log_level) == (8400, "info")


@pytest.mark.parametrize("build", BUILDERS)
@pytest.mark.parametrize(
    ("given", "named"), [("argument", "config_file"), ("variable", "SKILLDESK_CONFIG_FILE")]
)
def test_a_missing_config_file_is_a_config_error_naming_it(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    build: Callable[..., Settings],
    given: str,
    named: str,
) -> None:
    missing = tmp_path / "nope.yaml"
    arguments: dict[str, Path] = {}
    if given == "argument":
        arguments["config_file"] = missing
    else:
        monkeypatch.setenv("SKILLDESK_CONFIG_FILE", str(missing))
    with pytest.raises(ConfigError, match=rf"^{named}: .*nope\.yaml does not exist"):
        build(**arguments)


def test_bad_value_names_the_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SKILLDESK_PORT", "eighty")
    with pytest.raises(ConfigError, match="SKILLDESK_PORT"):
        load_settings()


@pytest.mark.parametrize(
    ("variable", "value", "words"),
    [
        ("SKILLDESK_CHECKPOINT_URL", "mysql://x", "postgresql://"),
        ("SKILLDESK_REDIS_URL", "http://127.0.0.1:6379/0", "redis://host:6379/0"),
        ("SKILLDESK_REDIS_URL", "redis://127.0.0.1:6379/cache", "not a number"),
        ("SKILLDESK_SKILLS_EMBEDDING_PRECISION", "fp16", "int8"),
    ],
)
def test_an_unknown_store_redis_or_precision_stops_start_up_naming_it(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, words: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError, match=variable) as info:
        load_settings()
    assert words in str(info.value)


def test_missing_config_file_is_reported(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SKILLDESK_CONFIG_FILE", str(tmp_path / "nope.yaml"))
    with pytest.raises(ConfigError, match="SKILLDESK_CONFIG_FILE"):
        load_settings()


def test_overrides_beat_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SKILLDESK_HOST", "0.0.0.0")
    assert load_settings(host="127.0.0.2", port=None).host == "127.0.0.2"
