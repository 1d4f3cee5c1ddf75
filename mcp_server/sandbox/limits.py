"""How many processes one sandboxed run may have (issue 33, M3): a pids cgroup of its own where the machine lets the
daemon make one, else RLIMIT_NPROC inside bubblewrap's user namespace.

- A pids cgroup (`pids.max`, processes and threads together) holds for root too, and is what a fork bomb meets:
  its fork() fails with EAGAIN inside the run, the daemon and the runs beside it go on. The daemon needs to be able
  to make a child of its own cgroup: cgroup v1's `pids` hierarchy as root, or cgroup v2 with `pids` delegated to its
  cgroup (`cgroup.subtree_control`, e.g. a systemd unit with `Delegate=yes`).
- Else, a daemon that is not root: `ulimit -u` inside the sandbox. bubblewrap then runs the run in a user namespace
  of its own, where the kernel counts RLIMIT_NPROC per namespace: the limit counts only the run's processes.
- Else (root without a usable pids cgroup) nothing holds: RLIMIT_NPROC never binds uid 0, and the run's log says so.

A run enters its cgroup before bubblewrap starts (a shell writes itself into the cgroup, then execs
bubblewrap), so nothing of it is ever outside; when that write fails the run does not start (fail closed).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import signal
import threading
import time
from pathlib import Path

log = logging.getLogger("agentqueue.sandbox")

CGROUP_ROOT = Path("/sys/fs/cgroup")
GROUP = "agentqueue"  # the folder under the daemon's own cgroup that holds one cgroup per run
_ids = itertools.count(1)
_left: set[Path] = set()  # this daemon's cgroups whose run had not emptied them when it ended
_left_lock = threading.Lock()
REAP_PERIOD = 0.02  # seconds between a reaper's tries at the cgroups still emptying
REAP_FOR = 5.0  # how long the reaper tries after the last one was left; then the next run's sweep does
_reaper: threading.Thread | None = None
# Moves the shell into the cgroup whose entry file is $0 (writing "0" there means "the writer"), then becomes the
# run's command.
_ENTER = ('echo 0 > "$0" || { echo "agentqueue sandbox: the run could not enter its process limit ($0)" >&2; '
          'exit 126; }; exec "$@"')
_ULIMIT = 'ulimit -u "$0" || { echo "agentqueue sandbox: could not set the run\'s process limit" >&2; exit 126; }; ' \
          'exec "$@"'


def _own_cgroup(version: str) -> str | None:
    """The daemon's own cgroup path in the v1 `pids` hierarchy ("1") or the v2 one ("2"), from /proc/self/cgroup."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if (version == "1" and "pids" in controllers.split(",")) or (version == "2" and controllers == ""):
            return path
    return None


def _candidates() -> list[Path]:
    found = []
    v1 = _own_cgroup("1")
    if v1 is not None and (CGROUP_ROOT / "pids" / "cgroup.procs").exists():
        found.append(CGROUP_ROOT / "pids" / v1.lstrip("/"))
    v2 = _own_cgroup("2")
    if v2 is not None:
        for mount in (CGROUP_ROOT, CGROUP_ROOT / "unified"):
            own = mount / v2.lstrip("/")
            try:
                if "pids" in (own / "cgroup.subtree_control").read_text().split():
                    found.append(own)
            except OSError:
                continue
    return found


_base: Path | None | bool = False  # False: not looked for yet


def pids_base() -> Path | None:
    """The folder this daemon makes each run's pids cgroup in (created), or None where it cannot; found once."""
    global _base
    if _base is False:
        _base = None
        for own in _candidates():
            base = own / GROUP
            try:
                base.mkdir(exist_ok=True)
                probe = base / f"probe-{os.getpid()}"
                probe.mkdir(exist_ok=True)
                ok = (probe / "pids.max").exists()
                probe.rmdir()
            except OSError:
                continue
            if ok:
                _base = base
                break
    return _base if isinstance(_base, Path) else None


class ProcessLimit:
    """One run's process limit: `wrap(argv)` starts argv inside it, `close()` ends what is left and removes it."""

    def __init__(self, max_processes: int) -> None:
        self.max = max_processes
        self.folder: Path | None = None
        base = pids_base()
        if base is not None:
            _sweep(base)
            folder = base / f"{os.getpid()}-{next(_ids)}"
            try:
                folder.mkdir()
                (folder / "pids.max").write_text(str(max_processes))
                self.folder = folder
            except OSError as error:
                log.warning("could not make the run's pids cgroup %s: %s", folder, error)
                with contextlib.suppress(OSError):
                    folder.rmdir()


    def wrap_outer(self, argv: list[str]) -> list[str]:
        """bubblewrap's argv, started from inside the run's cgroup."""
        if self.folder is None:
            return argv
        return ["/bin/sh", "-c", _ENTER, str(self.folder / _entry_file(self.folder)), *argv]

    def inner(self) -> list[str]:
        """What goes before the command inside the sandbox: `ulimit -u` where no cgroup holds and it binds."""
        if self.folder is not None or os.geteuid() == 0:
            return []
        return ["/bin/sh", "-c", _ULIMIT, str(self.max)]

    def peak(self) -> int | None:
        """The most processes the run had at once (cgroup v2 `pids.peak`), else the current count."""
        if self.folder is None:
            return None
        for name in ("pids.peak", "pids.current"):
            with contextlib.suppress(OSError, ValueError):
                return int((self.folder / name).read_text())
        return None

    def hit(self) -> int:
        """How many times a fork failed at the limit (`pids.events` max)."""
        if self.folder is not None:
            with contextlib.suppress(OSError, ValueError):
                return int((self.folder / "pids.events").read_text().split()[-1])
        return 0

    def close(self) -> None:
        """What is left of the run killed and its cgroup removed; never waited for: one still emptying (its last
        processes exiting) is removed by a reaper thread, else by the next run's sweep."""
        if self.folder is None:
            return
        if not _remove(self.folder, wait=0):
            _reap_later(self.folder)
        self.folder = None


def _entry_file(folder: Path) -> str:
    """Where the run's shell writes itself. cgroup v1's `tasks` moves one thread (the shell has only one) without the
    kernel's global threadgroup lock, whose write side waits out an RCU grace period: ~8-10 ms a run start paid
    through `cgroup.procs` (bench/sandbox_start.py). cgroup v2 has no `tasks`: `cgroup.procs` there."""
    return "tasks" if (folder / "tasks").exists() else "cgroup.procs"


def describe(max_processes: int) -> str:
    """How a run's process limit holds on this machine, for its log."""
    if pids_base() is not None:
        return f"at most {max_processes} processes and threads (a pids cgroup)"
    if os.geteuid() != 0:
        return f"at most {max_processes} processes (RLIMIT_NPROC in the sandbox's user namespace)"
    return ("NO process limit: the daemon runs as root and cannot make a pids cgroup here "
            "(RLIMIT_NPROC does not bind root)")


def _kill_all(folder: Path) -> None:
    with contextlib.suppress(OSError):
        for pid in (folder / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(pid), signal.SIGKILL)


def _remove(folder: Path, wait: float) -> bool:
    deadline = time.monotonic() + wait
    while True:
        _kill_all(folder)
        try:
            folder.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError:
            if time.monotonic() >= deadline:
                return False  # still emptying: the next run's sweep removes it
            time.sleep(0.01)


def _sweep(base: Path) -> None:
    """The cgroups of runs that ended without theirs being removed: this daemon's, or one that no longer runs."""
    try:
        entries = list(base.iterdir())
    except OSError:
        return
    for entry in entries:
        owner, _, _ = entry.name.partition("-")
        if not owner.isdigit() or int(owner) == os.getpid() or _alive(int(owner)):
            continue
        _remove(entry, wait=0)
    _sweep_left()


def _reap_later(folder: Path) -> None:
    """`folder` tried again by the reaper thread (started when none runs) until it is gone or REAP_FOR passes."""
    global _reaper
    with _left_lock:
        _left.add(folder)
        if _reaper is None or not _reaper.is_alive():
            _reaper = threading.Thread(target=_reap, daemon=True, name="agentqueue-cgroup-reaper")
            _reaper.start()


def _reap() -> None:
    global _reaper
    until = time.monotonic() + REAP_FOR
    while time.monotonic() < until:
        time.sleep(REAP_PERIOD)
        if _sweep_left():
            until = time.monotonic() + REAP_FOR
        with _left_lock:
            if not _left:
                _reaper = None
                return
    with _left_lock:
        _reaper = None


def settled(timeout: float) -> bool:
    """Whether every cgroup this daemon left was removed within `timeout` seconds (a clean stop waits on it)."""
    deadline = time.monotonic() + timeout
    while True:
        with _left_lock:
            if not _left:
                return True
        if time.monotonic() >= deadline:
            return False
        _sweep_left()
        time.sleep(REAP_PERIOD)


def _sweep_left() -> bool:
    """This daemon's left cgroups tried once each; whether any was removed."""
    with _left_lock:
        left = list(_left)
    removed = False
    for entry in left:
        if _remove(entry, wait=0):
            removed = True
            with _left_lock:
                _left.discard(entry)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
