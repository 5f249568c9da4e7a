"""What every surface takes of a caller's ``Idempotency-Key`` header: the HTTP routes (its
``Annotated`` alias in ``app.api.deps``) and ``/mcp`` (``app.mcp.server``) alike."""

from __future__ import annotations

MAX_KEY_CHARS = 200  # of an Idempotency-Key, on every surface (/mcp too)
