"""What the routes need, built once per process from the settings."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import structlog
from langgraph.checkpoint.base import BaseCheckpointSaver

from agents.checkpoint import open_checkpointer
from agents.conversations import Conversations
from agents.errors import NO_MODEL_HINT
from agents.graph.builder import build_graph
from agents.models import ModelGateway
from agents.prompts import Prompts
from app.settings import Settings

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Services:
    """The long-lived parts of a running service."""

    settings: Settings
    gateway: ModelGateway
    checkpointer: BaseCheckpointSaver[Any]
    conversations: Conversations


@asynccontextmanager
async def open_services(settings: Settings) -> AsyncIterator[Services]:
    """Validate the model profiles, open the checkpointer and compile the graph."""
    gateway = ModelGateway(settings.models())
    if not gateway.configured:
        log.warning("model.not_configured", hint=NO_MODEL_HINT)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    async with open_checkpointer(settings.resolved_checkpoint_url) as checkpointer:
        graph = build_graph(gateway, checkpointer, Prompts(settings.prompts_dir))
        log.info(
            "service.ready",
            checkpointer=type(checkpointer).__name__,
            model_profiles=sorted(gateway.config.profiles) if gateway.config else [],
        )
        yield Services(settings, gateway, checkpointer, Conversations(graph))
