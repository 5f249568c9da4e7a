"""What several command groups share: settings with the command line's overrides."""

from __future__ import annotations

from typing import Any

import typer

from agents.errors import ConfigError
from app.settings import Settings, load_settings


def load_cli_settings(**overrides: Any) -> Settings:
    """Settings with command-line overrides; a configuration error exits with status 2."""
    try:
        settings = load_settings(**overrides)
        settings.models()  # model profiles are validated before anything starts
    except ConfigError as exc:
        typer.echo(f"skilldesk: configuration error: {exc}", err=True)
        raise typer.Exit(2) from None
    return settings
