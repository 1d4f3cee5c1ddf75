"""Lowering the CPU priority of what AgentQueue starts, so its own work (a landing, an answer to a client) and the
person's programs go first when the cores are busy. Best effort everywhere: a process may have exited already.

Linux shares the CPU between sessions before it shares a session's part between its processes by their niceness
(autogroups, on in most desktop kernels): a session started for an agent weighs as much as the daemon's whole session,
whatever each of its processes' niceness. So an agent's session is lowered as a whole (`/proc/PID/autogroup`) as well
as each of its processes (started through `nice`, whose niceness what they start inherits).
"""

from __future__ import annotations

import errno
import functools
import os
import re
import shutil

MAX_NICE = 19


def lower_process(pid: int, by: int) -> None:
    """`pid`'s niceness raised by `by` above its own (its priority lowered)."""
    try:
        os.setpriority(os.PRIO_PROCESS, pid, min(os.getpriority(os.PRIO_PROCESS, pid) + by, MAX_NICE))
    except OSError:
        pass


def niced(argv: list[str], by: int) -> list[str]:
    """`argv` started `by` niceness levels below the daemon, through coreutils' `nice`, so the first process already
    runs there and every process it starts inherits it. Setting a running group's niceness instead
    (setpriority(PRIO_PGRP)) misses a child bubblewrap is forking at that moment: it keeps the old niceness (seen
    once in thirty sandboxed starts). As it is when there is no `nice` or nothing to lower."""
    tool = _nice_tool() if by else None
    return [tool, "-n", str(by), *argv] if tool else argv


@functools.lru_cache(maxsize=1)
def _nice_tool() -> str | None:
    """coreutils' `nice`: the system's own first (it runs outside the sandbox, as bubblewrap does), else PATH's."""
    return next((p for p in ("/usr/bin/nice", "/bin/nice") if os.access(p, os.X_OK)), None) or shutil.which("nice")


def lower_autogroup(leader: int, by: int) -> bool:
    """The autogroup of the session `leader` started set `by` niceness levels below the daemon's own. False when the
    kernel said to try again: it takes one autogroup change in 0.1 s from a process without CAP_SYS_ADMIN (the
    caller tries again later); True when done, or when there is nothing to do (no autogroups, or it exited)."""
    try:
        fd = os.open(f"/proc/{leader}/autogroup", os.O_WRONLY)
    except OSError:
        return True
    try:
        os.write(fd, str(min(_own_autogroup_nice() + by, MAX_NICE)).encode())
    except OSError as error:
        return error.errno != errno.EAGAIN
    finally:
        os.close(fd)
    return True


def _own_autogroup_nice() -> int:
    """The niceness of the daemon's own autogroup ("/autogroup-42 nice 0"); 0 when unknown."""
    try:
        with open("/proc/self/autogroup", encoding="ascii") as own:
            found = re.search(r"nice (-?\d+)", own.read())
    except OSError:
        return 0
    return int(found.group(1)) if found else 0
