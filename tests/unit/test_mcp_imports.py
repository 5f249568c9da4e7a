"""The MCP transport stands beside the HTTP routes, not on them: what both take of a request
(the Idempotency-Key's limit) comes from a module of the service both import."""

from __future__ import annotations

import ast
from pathlib import Path

MCP = Path(__file__).resolve().parents[2] / "app" / "mcp"
HTTP_ONLY = ("app.api.deps", "app.api.routes")  # the routes' dependencies, the routes


def _imported(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_the_mcp_transport_imports_nothing_of_the_http_routes_dependencies() -> None:
    # Review: app/mcp/server.py took MAX_KEY_CHARS from app/api/deps.py.
    for path in sorted(MCP.glob("*.py")):
        wrong = {n for n in _imported(path) if n.startswith(HTTP_ONLY)}
        assert not wrong, f"{path.name} imports {sorted(wrong)}"
