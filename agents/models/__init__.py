"""The model gateway: named profiles, built on litellm, used through LangChain."""

from agents.models.config import ModelProfile, ModelsConfig, load_models_config
from agents.models.gateway import ModelGateway
from agents.models.usage import UsageRecord, UsageRecorder

__all__ = [
    "ModelGateway",
    "ModelProfile",
    "ModelsConfig",
    "UsageRecord",
    "UsageRecorder",
    "load_models_config",
]
