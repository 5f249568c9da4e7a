"""The scripted server in a process of its own, driven through a pipe.

For benchmarks: a server running in the client's interpreter competes with it for the GIL,
so the client's time would include waits for the server's thread and the server's time
waits for the client's. A model server is another process; so is this one.
Script items and forced-tool answers cross the pipe pickled: use ``Reply`` values and
module-level functions (or ``functools.partial`` of them), not lambdas.
"""

from __future__ import annotations

import gc
import multiprocessing
from multiprocessing.connection import Connection
from typing import Any

from tests.fakellm.request import RequestView
from tests.fakellm.script import Reply, ScriptItem
from tests.fakellm.server import FakeLLM


class FakeLLMProcess:
    """FakeLLM's scripting interface, served from a spawned process.

    Use as a context manager; ``base_url`` is valid while it runs.
    """

    def __init__(self) -> None:
        self._conn: Connection | None = None
        self._process: Any = None
        self.base_url = ""

    def __enter__(self) -> FakeLLMProcess:
        context = multiprocessing.get_context("spawn")  # no copy of the client's threads
        mine, theirs = context.Pipe()
        self._process = context.Process(target=_serve, args=(theirs,), daemon=True)
        self._process.start()
        theirs.close()
        self._conn = mine
        try:
            if not mine.poll(60):
                raise RuntimeError("the FakeLLM process did not start within 60 s")
            self.base_url = mine.recv()
        except EOFError:
            raise RuntimeError(
                "the FakeLLM process exited before serving (its error is printed above)"
            ) from None
        finally:
            if not self.base_url:
                self._process.kill()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._conn is not None:
            self._conn.send(None)
            self._conn.close()
            self._conn = None
        if self._process is not None:
            self._process.join(10)
            if self._process.is_alive():
                self._process.kill()
            self._process = None

    @property
    def pid(self) -> int:
        """The serving process's id (for its CPU time)."""
        if self._process is None:
            raise RuntimeError("FakeLLMProcess is not running")
        return int(self._process.pid)

    def _ask(self, name: str, *args: Any) -> Any:
        if self._conn is None:
            raise RuntimeError("FakeLLMProcess is not running")
        self._conn.send((name, args))
        ok, value = self._conn.recv()
        if not ok:
            raise value
        return value

    def script(self, *items: ScriptItem) -> None:
        """Append replies (or picklable callables ``RequestView -> Reply``) to the script."""
        self._ask("script", *items)

    def on_forced_tool(self, name: str, answer: Any) -> None:
        """Answer requests forcing tool ``name`` with ``answer(RequestView) -> Reply``
        (picklable)."""
        self._ask("on_forced_tool", name, answer)

    def problems(self) -> list[str]:
        """Replies left over, requests with no scripted reply, failed script callables."""
        result: list[str] = self._ask("problems")
        return result

    def reset(self) -> None:
        """Clear the script, the recorded requests and the timings."""
        self._ask("reset")

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every received JSON request body, in order."""
        result: list[dict[str, Any]] = self._ask("requests")
        return result

    @property
    def views(self) -> list[RequestView]:
        """The parsed view of every received request, in order."""
        result: list[RequestView] = self._ask("views")
        return result

    @property
    def answering(self) -> list[tuple[float, float]]:
        """The server's answering intervals (``time.perf_counter()``, the same clock in every
        process of the machine)."""
        result: list[tuple[float, float]] = self._ask("answering")
        return result


def _serve(conn: Connection) -> None:
    with FakeLLM() as fake:
        # A model server's own pauses are not the client's latency: the full garbage
        # collections of this process, over the exchanges it keeps (a heap growing with every
        # request of a load), stalled every request in flight for up to 0.2 s, which the load
        # benchmark counted as latency the service added. They run when the script is reset,
        # between loads; young objects are still collected as they go.
        gc.freeze()
        gc.set_threshold(700, 10, 2**31 - 1)
        conn.send(fake.base_url)
        while True:
            try:
                message = conn.recv()
            except EOFError:
                return
            if message is None:
                return
            name, args = message
            try:
                member = getattr(fake, name)
                conn.send((True, member(*args) if callable(member) else member))
            except Exception as exc:
                conn.send((False, exc))
            if name == "reset":
                gc.collect()


__all__ = ["FakeLLMProcess", "Reply"]
