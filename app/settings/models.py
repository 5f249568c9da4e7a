"""Which models the service calls: the default model, the profiles file, and the profile
each part of the graph uses."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field, SecretStr

from agents.models import ModelsConfig, load_models_config


class ModelSettings(BaseModel):
    """The default model and each part's profile (a part of ``Settings``)."""

    model: str | None = Field(
        None, description="Default model as 'provider/model' (e.g. 'openai/gpt-4o-mini')."
    )
    model_api_base: str | None = Field(None, description="Base URL of the default model's API.")
    model_api_key: SecretStr | None = Field(None, description="API key of the default model.")
    models_file: Path | None = Field(None, description="YAML file with more model profiles.")
    router_profile: str | None = Field(
        None, description="Model profile of the router's tie-break (default: the default)."
    )
    planner_profile: str | None = Field(
        None, description="Model profile of the planner of multi-request messages."
    )
    aggregator_profile: str | None = Field(
        None, description="Model profile of the aggregator of parallel experts' results."
    )
    expert_profile: str | None = Field(
        None, description="Model profile of the experts (one skill, joint, or per task)."
    )
    assistant_profile: str | None = Field(
        None, description="Model profile of the general assistant (no skill matched)."
    )
    summary_model: str | None = Field(
        None, description="Model profile that writes summaries (default: the default)."
    )

    def models(self) -> ModelsConfig | None:
        """The validated model profiles (``None`` when no model is configured)."""
        key = self.model_api_key.get_secret_value() if self.model_api_key else None
        return load_models_config(
            model=self.model,
            api_base=self.model_api_base,
            api_key=key,
            models_file=self.models_file,
            nodes={
                "router": self.router_profile,
                "planner": self.planner_profile,
                "aggregator": self.aggregator_profile,
                "expert": self.expert_profile,
                "assistant": self.assistant_profile,
                "summarizer": self.summary_model,
            },
        )
