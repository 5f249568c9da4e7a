"""The app served by uvicorn in a thread, for tests whose client must act as a real one
(go away mid-stream, reconnect), and a reader of its Server-Sent Events."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn

from app.main import create_app


@contextlib.contextmanager
def serving(settings: Any, app: Any = None) -> Iterator[str]:
    """The app of ``settings`` (or ``app``) served on a free port; its base URL."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    app = app or create_app(settings)
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None)
    uv = uvicorn.Server(config)
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    for _ in range(400):
        if uv.started:
            break
        time.sleep(0.025)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        uv.should_exit = True
        thread.join(timeout=20)


def read_events(lines: Iterator[str], stop_after: int | None = None) -> list[dict[str, str]]:
    """Server-Sent Events from a line stream (comments skipped), up to ``stop_after``."""
    events: list[dict[str, str]] = []
    fields: dict[str, str] = {}
    for line in lines:
        if line.startswith(":"):
            continue
        if not line:
            if fields:
                events.append(fields)
                fields = {}
                if stop_after is not None and len(events) == stop_after:
                    break
            continue
        name, _, value = line.partition(": ")
        fields[name] = value
    return events
