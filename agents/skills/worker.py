"""A worker process that runs one skill's handlers (``python -m agents.skills.worker``).

Started by ``agents.skills.workers``; talks over its standard input and output in frames of
a 4-byte length and a pickle (in), or a mark (``REPLY_MARK``), a 4-byte length and a JSON
array (out: data only, as a handler can write there too). It imports only the standard
library, the skill's own modules and the trimming of results (``agents.skills.trimming``,
standard library only too), so it starts in tens of milliseconds, and a handler that spins,
blocks, leaks or crashes takes only this process down: the service kills and replaces it. On
Linux it is two processes (``_serve_beside_a_reaper``): the one the service started waits for
the orphans its handlers leave, its child serves the calls.

Messages in: ``("bind", skill, package, path, memory_mb, code)`` once (``code``: the
folder's Python files as its last good version had them, ``importing.import_handler``), then
``("call", number, module, function, arguments, context, cpu_s, limits)``, ``limits`` the
tool's result limits as a dict. Messages out: ``("imported", module, error)`` when a call had
to import its module, then ``("result", number, ok, kind, payload)``: ok, ``kind`` is
``trimmed`` and ``payload`` ``[content, data, truncated]``, the value trimmed to the limits
here, so the service does no work in proportion to it (``agents/skills/trimming.py``), or
``json`` and ``payload`` the whole value as JSON text, for a value whose ``files`` the
service adopts before it trims it; not ok, ``kind`` is ``raised`` and ``payload``
``[class, error]`` (what the handler raised: its class's name, and the service's words for
it), or ``kind`` is an error code and ``payload`` the error. What the handlers print goes to
its standard error, each call's between two marks (``mark_output``), so the service logs it
under that call.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import inspect
import json
import os
import pickle
import resource
import signal
import struct
import sys
import time
import types
from typing import Any, BinaryIO

from agents.skills.importing import import_handler
from agents.skills.trimming import (
    TOO_DEEP,
    NotData,
    PlainLimits,
    as_json,
    has_files,
    trim,
)

_HEADER = struct.Struct("!I")
# A reply's header: a mark, then the length. Bytes a handler writes to the pipe by mistake
# (a print to a file descriptor it found) are told from a reply by the mark, not read as
# the length of one.
REPLY_MARK = b"\x00\xffSD"  # not text: a print() cannot start with it
_REPLY_HEADER = struct.Struct("!4sI")
# Where a call's output starts and ends in what the handlers print (stderr): a line of its
# own, ``OUTPUT_MARK`` then ``start N`` or ``end N``, so the service attributes each line to
# the call under way when it was printed, however late it reads it.
OUTPUT_MARK = b"\x00\xffSD call "
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_TREE_ROUNDS = 100  # looks for processes still starting others, at most
_REAP_WAIT_S = 2.0  # how long the subreaper waits for what it killed
_CGROUP_ENV = "SKILLDESK_WORKER_CGROUP"  # cgroups.ENV (this module imports only the stdlib)


def read_frame(stream: BinaryIO) -> Any:
    """One message, or None at the end of the stream."""
    header = _read_exactly(stream, _HEADER.size)
    if header is None:
        return None
    (size,) = _HEADER.unpack(header)
    data = _read_exactly(stream, size)
    return None if data is None else pickle.loads(data)


def _read_exactly(stream: BinaryIO, size: int) -> bytes | None:
    chunks: list[bytes] = []
    while size:
        chunk = stream.read(size)
        if not chunk:
            return None
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def frame(message: Any) -> bytes:
    """A message from the service as bytes on the wire (read here only)."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(data)) + data


def reply_frame(message: tuple[Any, ...]) -> bytes:
    """A reply to the service as bytes on the wire: a JSON array, data only. The handlers run
    in this process and can write to the same pipe, so nothing the service reads from it
    may be able to run code there (as a pickle could)."""
    data = json.dumps(list(message)).encode()  # ASCII: a lone surrogate is escaped
    return _REPLY_HEADER.pack(REPLY_MARK, len(data)) + data


class Worker:
    """The worker's state: the skill it serves and the modules it imported."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.package = ""
        self.path = ""
        self.code: dict[str, str] | None = None
        self.modules: dict[str, types.ModuleType] = {}
        self.loop = asyncio.new_event_loop()

    def send(self, message: tuple[Any, ...]) -> None:
        self.out.write(reply_frame(message))
        self.out.flush()

    def bind(
        self,
        skill: str,
        package: str,
        path: str,
        memory_mb: int | None,
        code: dict[str, str] | None = None,
    ) -> None:
        """Serve ``skill`` (its folder is the package ``package``, its modules ``code``)
        within ``memory_mb``."""
        self.package, self.path, self.code = package, path, code
        if memory_mb:
            limit = memory_mb * 1024 * 1024
            _, hard = resource.getrlimit(resource.RLIMIT_DATA)
            resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))

    def call(
        self,
        number: int,
        module: str,
        function: str,
        arguments: dict[str, Any],
        context: Any,
        cpu_s: float,
        limits: dict[str, Any],
    ) -> None:
        """Run one handler call and send its result trimmed to ``limits`` (``context`` goes
        to handlers that declare a ``context`` parameter). What the handlers print meanwhile
        is marked as this call's (``OUTPUT_MARK``)."""
        mark_output(b"start", number)
        try:
            self._call(number, module, function, arguments, context, cpu_s, limits)
        finally:
            mark_output(b"end", number)

    def _call(
        self,
        number: int,
        module: str,
        function: str,
        arguments: dict[str, Any],
        context: Any,
        cpu_s: float,
        limits: dict[str, Any],
    ) -> None:
        handler = self._handler(module, function)
        if handler is None:
            return  # the import failed and was reported
        if "context" in inspect.signature(handler).parameters:
            arguments = {**arguments, "context": context}
        used = sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        resource.setrlimit(resource.RLIMIT_CPU, (int(used + cpu_s) + 1, hard))
        try:
            value = handler(**arguments)
            if inspect.isawaitable(value):
                value = self.loop.run_until_complete(value)
        except BaseException as exc:  # SystemExit or KeyboardInterrupt from a handler included
            self.send(("result", number, False, "raised", [type(exc).__name__, describe(exc)]))
            return
        self.send(result_reply(number, value, PlainLimits(**limits)))

    def _handler(self, module: str, function: str) -> Any:
        loaded = self.modules.get(module)
        if loaded is None:
            try:
                loaded = import_handler(self.package, self.path, module, self.code)
            except BaseException as exc:
                self.send(("imported", module, describe(exc)))
                return None
            self.modules[module] = loaded
            self.send(("imported", module, None))
        return getattr(loaded, function)


def mark_output(what: bytes, number: int) -> None:
    """Mark the start or end of call ``number`` in the output, after what was printed before
    (flushed first: a print to a pipe is buffered). A line of its own: a line the handler left
    unended is ended."""
    for out in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        with contextlib.suppress(Exception):  # closed or replaced by a handler: nothing to send
            if out is not None:
                out.flush()
    with contextlib.suppress(OSError):
        os.write(2, b"\n" + OUTPUT_MARK + what + b" %d\n" % number)


def result_reply(number: int, value: Any, limits: PlainLimits) -> tuple[Any, ...]:
    """The reply to call ``number`` that returned ``value``: trimmed to ``limits``, or the
    error the service makes a tool error of. The value is made JSON data first, as it reaches
    the service when the service trims it (a value with files to adopt): the same result
    either way, and the same errors."""
    try:
        return _reply(number, value, limits)
    except RecursionError:  # the worker would die of it, its call told only "exited"
        return ("result", number, False, "not_json", TOO_DEEP)


def _reply(number: int, value: Any, limits: PlainLimits) -> tuple[Any, ...]:
    if isinstance(value, str):
        return ("result", number, True, "trimmed", list(trim(value, limits)))
    try:
        text = json.dumps(value, ensure_ascii=False, default=as_json)
    except NotData as exc:
        return ("result", number, False, "tool_failed", str(exc))
    except (TypeError, ValueError) as exc:
        return ("result", number, False, "not_json", str(exc))
    data = json.loads(text)
    if has_files(data):  # adopted as attachments by the service, then trimmed there
        return ("result", number, True, "json", text)
    try:  # JSON data already: nothing here is expected to fail
        trimmed = trim(data, limits)
    except (TypeError, ValueError) as exc:
        return ("result", number, False, "not_json", str(exc))
    return ("result", number, True, "trimmed", list(trimmed))


def describe(exc: BaseException) -> str:
    """What a handler raised, as the service words it."""
    if isinstance(exc, MemoryError):  # raised with no message: say what it means here
        limit, _ = resource.getrlimit(resource.RLIMIT_DATA)
        held = "" if limit == resource.RLIM_INFINITY else f" (memory_mb: {limit >> 20} MB)"
        return f"MemoryError: the handler ran out of memory{held}"
    if isinstance(exc, Exception) and not isinstance(exc, StopIteration | StopAsyncIteration):
        return f"{type(exc).__name__}: {exc}"
    return f"the handler raised {type(exc).__name__}({exc})"


def _die_with_parent(subreaper: bool = True) -> bool:
    """Ask the kernel to kill this process when its parent dies (Linux), so a handler
    spinning here cannot outlive a killed service; and (``subreaper``) to make this process
    the parent of every process its handlers start and leave (a daemon, a new session), so
    the service finds and stops them with the worker (``Worker.kill``). False where the
    kernel has no such calls."""
    try:
        libc = ctypes.CDLL(None)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL) != 0:
            return False
        return not subreaper or libc.prctl(_PR_SET_CHILD_SUBREAPER, 1) == 0
    except (OSError, AttributeError):
        return False


def _serve_beside_a_reaper() -> None:
    """Split the worker in two (Linux): this process, the subreaper, only waits for what ends
    below it, while a child of it serves the calls and returns here.

    The daemons a handler leaves are handed to the subreaper; each that ends stays a zombie,
    holding a slot of the process table, until the subreaper waits for it, and a daemon that
    keeps starting short-lived processes would fill the table. Waiting for every child in the
    process that runs the handlers would take the exit statuses of the handlers' own
    children (``os.fork``, ``os.posix_spawn``, a ``Popen``) from under them; here the
    handlers' children are the serving process's own, and only orphans reach the subreaper.
    The subreaper ends as the serving process ends (its status, or its signal), so the
    service sees one worker.
    """
    reaper = os.getpid()
    child = os.fork()
    if child == 0:
        _die_with_parent(subreaper=False)
        if os.getppid() != reaper:  # the subreaper died before the call above
            os._exit(1)
        return
    os.close(0)  # the service's pipes are the serving process's: they close when it ends
    os.close(1)
    while True:
        pid, status = os.wait()
        if pid != child:
            continue  # an orphan that ended: waited for, gone from the table
        # What the handlers left running goes with the worker, however the serving process
        # ended (closed, or dead of its own: a crash, a limit), not on to the machine's init.
        _stop_below()
        if os.WIFSIGNALED(status):  # killed (a limit, a timeout): the same end here
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # its core, not a second one
            with contextlib.suppress(OSError, ValueError):  # SIGKILL has no handler to reset
                signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
            os.kill(reaper, os.WTERMSIG(status))
        os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


def _stop_below() -> None:
    """Kill every process below this one (``kill_below``), then wait for them."""
    kill_below(os.getpid())
    deadline = time.monotonic() + _REAP_WAIT_S  # one that cannot be killed is left behind
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return  # none left
        if pid == 0:
            time.sleep(0.01)


def kill_below(root: int) -> None:
    """Kill every process below ``root``. Stopped first, then killed: a process that keeps
    starting others cannot start one between the look at the tree and the kill (that one,
    orphaned to init once its parent died, would live on). The service's ``kill_tree`` and a
    worker's subreaper both use it (this module imports only the standard library)."""
    stopped: set[int] = set()
    for _ in range(_TREE_ROUNDS):  # until a look finds no process not yet stopped
        found = [pid for pid in descendants(root) if pid not in stopped]
        if not found:
            break
        for pid in found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGSTOP)
            stopped.add(pid)
    for pid in stopped:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def descendants(root: int) -> list[int]:
    """Every process below ``root`` (from Linux's /proc)."""
    found: list[int] = []
    todo = [root]
    while todo:
        parent = todo.pop()
        try:
            threads = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in threads:
            try:
                with open(f"/proc/{parent}/task/{tid}/children") as children:
                    kids = [int(p) for p in children.read().split()]
            except OSError:
                continue
            found += kids
            todo += kids
    return found


def enter_cgroup() -> None:
    """Move this process into the cgroup the service made for it (``cgroups.py``), before
    it starts anything: every process below it is then born in it, whatever it does later."""
    group = os.environ.pop(_CGROUP_ENV, None)
    if not group:
        return
    try:
        with open(os.path.join(group, "cgroup.procs"), "w") as procs:
            procs.write(str(os.getpid()))
    except OSError as exc:  # stopped by its tree alone, as without one
        print(f"skilldesk worker: not in its cgroup {group}: {exc}", file=sys.stderr)


def main() -> None:
    """Serve calls from standard input until the service closes it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the service's to handle
    enter_cgroup()
    if _die_with_parent():
        _serve_beside_a_reaper()
    # The protocol keeps private copies of stdin and stdout; a handler's print() goes to the
    # service's log (stderr) and its input() reads nothing, so neither can break a frame.
    inbox = os.fdopen(os.dup(0), "rb", buffering=0)
    worker = Worker(os.fdopen(os.dup(1), "wb"))
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    while True:
        message = read_frame(inbox)
        if message is None:
            return
        if message[0] == "bind":
            worker.bind(*message[1:])
        elif message[0] == "call":
            worker.call(*message[1:])


if __name__ == "__main__":
    main()
