"""Failpoints: a named place in the code where a test can make the process die at once
(``SKILLDESK_FAILPOINTS="workflow.node_done=work_order"``), to prove that what a crash
leaves behind is recovered. Unset (always, outside such tests), a failpoint costs a dict
lookup.
"""

from __future__ import annotations

import os
import signal

_ARMED: dict[str, str] = {}
for _item in os.environ.get("SKILLDESK_FAILPOINTS", "").split(","):
    if "=" in _item:
        _name, _detail = _item.split("=", 1)
        _ARMED[_name.strip()] = _detail.strip()


def hit(name: str, detail: str) -> None:
    """Die here (SIGKILL, as a power cut or the OOM killer would) when the failpoint
    ``name`` is armed for ``detail``."""
    if _ARMED.get(name) == detail:
        os.kill(os.getpid(), signal.SIGKILL)


def armed(name: str) -> bool:
    """Whether the failpoint ``name`` is armed (for a detail that costs work to compute)."""
    return name in _ARMED
