"""Fixtures several integration modules share."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from agents.models import ModelGateway
from agents.state.checkpointers import sqlite_url
from tests.pgkit import schema_url


@pytest.fixture(params=["sqlite", "postgres"])
def shared_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store URL that two processes open, each with a connection of its own: a SQLite
    file, and a PostgreSQL schema of its own on the machine's server."""
    if request.param == "sqlite":
        yield sqlite_url(tmp_path / "store.sqlite")
        return
    with schema_url("shared") as url:
        yield url


@pytest.fixture
async def gateway(model_settings: Any) -> AsyncIterator[ModelGateway]:
    """The model gateway of the test's settings (the scripted model server), closed after."""
    gateway = ModelGateway(model_settings.models())
    yield gateway
    await gateway.aclose()
