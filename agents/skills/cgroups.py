"""A cgroup (v2) for each skill worker, where the service may make one.

A worker's processes are otherwise found by walking its process tree (``worker.kill_below``),
and a process can leave that tree: a handler that kills its worker's subreaper hands what it
started to the machine's init. A cgroup holds every process started inside it whatever the
process does (a new session, a double fork), and one write to its ``cgroup.kill`` (Linux
5.14) ends them all. The service makes ``skilldesk-<pid>`` under its own cgroup and one
cgroup in it per worker, which the worker enters before it runs anything else
(``worker.enter_cgroup``), when it may: as root, or in a cgroup delegated to it (systemd's
``Delegate=yes``, a container with its own cgroup namespace and a writable cgroupfs). Where
it may not, workers are stopped by their tree alone, as before.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)
ENV = "SKILLDESK_WORKER_CGROUP"  # the cgroup a worker enters first (read by worker.py)
_EMPTY_WAIT_S = 2.0  # how long a killed worker's cgroup is waited for to empty


@dataclass(frozen=True)
class WorkerGroups:
    """Where this process makes its workers' cgroups: ``base``, under its own cgroup."""

    mount: Path  # where the cgroup v2 hierarchy is mounted
    base: Path  # <the mount><this process's cgroup>/skilldesk-<pid>

    @staticmethod
    @functools.cache
    def find() -> WorkerGroups | None:
        """This process's, or None where it cannot make cgroups (no cgroup v2, not allowed,
        a kernel without ``cgroup.kill``). Cgroups that service processes since ended left
        behind are emptied and removed on the way."""
        found = _own_cgroup()
        if found is None:
            return None
        mount, own = found
        if not os.access(own / "cgroup.procs", os.W_OK) or not os.access(own, os.W_OK):
            return None
        sweep(own)
        groups = WorkerGroups(mount, own / f"skilldesk-{os.getpid()}")
        try:
            groups.base.mkdir(exist_ok=True)
        except OSError as exc:
            log.info("skills.worker_cgroups_off", why=str(exc))
            return None
        if not (groups.base / "cgroup.kill").exists():  # Linux before 5.14
            _remove(groups.base)
            log.info("skills.worker_cgroups_off", why="the kernel has no cgroup.kill")
            return None
        atexit.register(_remove, groups.base)  # once its workers' own are gone
        log.info("skills.worker_cgroups", base=str(groups.base))
        return groups

    def make(self) -> Path | None:
        """A new cgroup for one worker (None if it cannot be made)."""
        path = self.base / f"worker-{uuid.uuid4().hex[:12]}"
        try:
            self.base.mkdir(exist_ok=True)  # removed when the last pool closed (``release``)
            path.mkdir()
        except OSError as exc:
            log.warning("skills.worker_cgroup_failed", path=str(path), error=str(exc))
            return None
        return path

    def release(self) -> None:
        """Remove this process's cgroup once no worker's is in it (a pool closed)."""
        _remove(self.base)

    @staticmethod
    def kill(path: Path) -> None:
        """Kill every process in the cgroup ``path``, at once."""
        with contextlib.suppress(OSError):
            (path / "cgroup.kill").write_text("1")

    @staticmethod
    async def remove(path: Path) -> None:
        """Remove the cgroup ``path`` once the processes killed in it have ended (a cgroup
        with a process in it cannot be removed); left for the next start if they do not."""
        deadline = time.monotonic() + _EMPTY_WAIT_S
        # Polled: cgroup.events changes are told through inotify, not worth a watcher here.
        while _populated(path) and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        _remove(path)


def _own_cgroup() -> tuple[Path, Path] | None:
    """The cgroup v2 mount and this process's cgroup directory in it (Linux), else None."""
    try:
        own = next(
            line[3:].strip()
            for line in Path("/proc/self/cgroup").read_text().splitlines()
            if line.startswith("0::")
        )
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except (OSError, StopIteration):
        return None
    for line in mounts:
        fields, _, fs = line.partition(" - ")
        parts = fields.split()
        if fs.split()[:1] != ["cgroup2"] or len(parts) < 5:
            continue
        root, mount = parts[3], Path(parts[4])
        if own == root or own.startswith(root.rstrip("/") + "/"):
            return mount, mount / own[len(root) :].lstrip("/")
    return None


def sweep(own: Path) -> None:
    """Empty and remove the ``skilldesk-<pid>`` cgroups of service processes that ended
    (killed, say, before they could remove their own). One named by this process's pid is
    a stale one (the pid used again) only before this process makes its own."""
    for path in own.glob("skilldesk-*"):
        pid = path.name.removeprefix("skilldesk-")
        if not pid.isdigit() or (Path(f"/proc/{pid}").exists() and int(pid) != os.getpid()):
            continue
        if int(pid) == os.getpid() and WorkerGroups.find.cache_info().currsize:
            continue  # this process's own, in use
        if _foreign(path):  # a service in another PID namespace: its pid means nothing here
            continue
        WorkerGroups.kill(path)
        deadline = time.monotonic() + _EMPTY_WAIT_S
        while _populated(path) and time.monotonic() < deadline:
            time.sleep(0.01)
        for worker in path.glob("worker-*"):
            _remove(worker)
        _remove(path)


def _foreign(path: Path) -> bool:
    """Whether a process in the cgroup ``path`` or its workers' lies outside this process's
    PID namespace (the kernel lists it as pid 0 here)."""
    for group in (path, *path.glob("worker-*")):
        try:
            if "0" in (group / "cgroup.procs").read_text().split():
                return True
        except OSError:
            continue
    return False


def _populated(path: Path) -> bool:
    """Whether a process is in the cgroup ``path`` or below it."""
    try:
        return "populated 1" in (path / "cgroup.events").read_text()
    except OSError:
        return False


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.rmdir()
