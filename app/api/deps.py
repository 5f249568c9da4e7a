"""Dependencies as Annotated aliases."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from agents.conversations import Conversations
from app.services import Services


def get_services(request: Request) -> Services:
    """The services opened in the app's lifespan."""
    services: Services = request.app.state.services
    return services


def get_conversations(request: Request) -> Conversations:
    """The conversation runner."""
    return get_services(request).conversations


ServicesDep = Annotated[Services, Depends(get_services)]
ConversationsDep = Annotated[Conversations, Depends(get_conversations)]
