"""What a skill's definition costs in a prompt, and whether its tools change the world: what
the router and the experts weigh before putting several definitions in one prompt."""

from __future__ import annotations

import json

from agents.models.structured import function_tool
from agents.skills.loader import Skill
from agents.tokens import count_tokens


class DefinitionTokens:
    """Tokens of a skill's instructions and tool schemas, counted once per version of its
    folder (the count reads SKILL.md and tokenises it)."""

    def __init__(self, limit: int = 4096) -> None:
        self.limit = limit
        self._counts: dict[tuple[str, str], int] = {}

    def of(self, skill: Skill) -> int:
        """The count for ``skill`` as its folder is now."""
        key = (skill.name, skill.fingerprint)
        count = self._counts.get(key)
        if count is None:
            tools = json.dumps(
                [function_tool(t.name, t.description, t.parameters) for t in skill.tools]
            )
            count = count_tokens(skill.body()) + count_tokens(tools)
            if len(self._counts) >= self.limit:  # versions of edited skills pile up otherwise
                self._counts.clear()
            self._counts[key] = count
        return count


DEFINITION_TOKENS = DefinitionTokens()


def definition_tokens(skill: Skill) -> int:
    """Tokens of ``skill``'s definition (instructions and tool schemas) in a prompt."""
    return DEFINITION_TOKENS.of(skill)


def side_effects(skill: Skill) -> bool:
    """Whether any tool of ``skill`` changes the world."""
    return any(t.side_effects for t in skill.tools)


def within(skills: list[Skill], budget: int, most: int) -> list[Skill]:
    """The first skills, in order, up to ``most`` of them, whose definitions fit ``budget``
    tokens together (a skill that does not fit ends the list: order is preference)."""
    chosen: list[Skill] = []
    used = 0
    for skill in skills[:most]:
        cost = definition_tokens(skill)
        if used + cost > budget:
            break
        chosen.append(skill)
        used += cost
    return chosen
