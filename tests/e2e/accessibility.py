"""axe-core (vendored for the tests, never served) run in the page: what it finds of serious
or critical impact on what is on screen."""

from __future__ import annotations

from pathlib import Path
from typing import Any

AXE = Path(__file__).parent / "vendor" / "axe.min.js"
SEVERE = ("serious", "critical")


def severe_violations(page: Any) -> list[str]:
    """Each serious or critical violation axe finds in the page now: rule, element, why."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.evaluate(AXE.read_text(encoding="utf-8"))  # as a test tool, past the page's CSP
    found: list[dict[str, Any]] = page.evaluate(
        """async () => (await axe.run(document, { resultTypes: ["violations"] })).violations
             .map((v) => ({ id: v.id, impact: v.impact, help: v.help,
                            nodes: v.nodes.map((n) => `${n.target.join(" ")}: ${n.failureSummary}`)
             }))"""
    )
    return [
        f"{v['id']} ({v['impact']}): {v['help']} — {node}"
        for v in found
        if v["impact"] in SEVERE
        for node in v["nodes"]
    ]


def check_in_light_and_dark(page: Any, view: str) -> None:
    """No serious or critical violation in ``view``, in the light scheme and the dark one."""
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        found = severe_violations(page)
        assert found == [], f"{view}, {scheme}:\n" + "\n".join(found)
    page.emulate_media(color_scheme="light")
