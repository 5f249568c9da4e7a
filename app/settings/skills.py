"""How skills are served: live reload, trust, worker cgroups, dense retrieval, the examples
the model writes, and what the tool server lists."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from agents.skills.embeddings import Precision

# The bundled skills that run in the service's process (read-only lookups on most turns;
# each skill.yaml says why): trusted by default, as no skill dropped in is.
BUNDLED_IN_PROCESS = (
    "device-alarms",
    "inventory",
    "maintenance-kb",
    "order-query",
    "sensor-readings",
)
_ON_OFF = {"true": "on", "yes": "on", "1": "on", "false": "off", "no": "off", "0": "off"}


class SkillSettings(BaseModel):
    """The skills' serving and the tool server's listing (a part of ``Settings``)."""

    skills_watch: bool = Field(True, description="Reload skills live when their folder changes.")
    skills_trusted: list[str] = Field(
        list(BUNDLED_IN_PROCESS),
        description="Skills whose handlers may run inside the service's process when their "
        "skill.yaml asks for isolation: thread (a JSON list); any other skill's handlers run "
        "in worker processes, whatever it asks. Default: the bundled lookup skills.",
    )
    skills_worker_cgroups: bool = Field(
        True,
        description="Each skill worker process in a cgroup (v2) of its own, where the service "
        "may make one (root, or a delegated cgroup): every process its handlers start ends "
        "with it, whatever they do. Off, or where it may not: stopped by its process tree.",
    )
    skills_embeddings: bool = Field(
        True, description="Dense (MiniLM) retrieval besides keywords; off: keywords only."
    )
    skills_embedding_precision: Precision = Field(
        "int8",
        description="MiniLM's linear layers in int8 (a query in about a third of the time, "
        "the same recall on the labelled set) or fp32 (the model's exact vectors).",
    )
    skills_embedding_model: Path | None = Field(
        None,
        description="A local sentence-transformers model folder for dense retrieval (a "
        "multilingual one, say); unset: the packaged MiniLM. Nothing is downloaded.",
    )
    skills_write_examples: bool = Field(
        True,
        description=(
            "The configured model (the router's profile) writes example messages for each "
            "skill that has none, once per skill version, in the background after a (re)load; "
            "cached by content hash beside the embeddings. Needs a model and dense retrieval; "
            "false: no such call is made."
        ),
    )
    mcp_list_skill_tools: Literal["auto", "on", "off"] = Field(
        "auto",
        description="Whether the tool server lists every skill tool beside the meta-tools "
        "(MCP tools/list): auto lists them while there are fewer than 50, so that a large "
        "catalogue is reached through search_skills.",
    )

    @field_validator("mcp_list_skill_tools", mode="before")
    @classmethod
    def _on_off(cls, value: Any) -> Any:
        if isinstance(value, bool):
            return "on" if value else "off"
        if isinstance(value, str):
            word = value.strip().lower()
            return _ON_OFF.get(word, word)
        return value

    def mcp_skill_tools_listed(self) -> bool | None:
        """Whether the tool server lists every skill tool; ``None``: decided by their number."""
        return {"on": True, "off": False}.get(self.mcp_list_skill_tools)
