"""Who is on the other end of the daemon's socket: the peer's pid and the processes it descends from.

The kernel says which process connected (SO_PEERCRED, read in the daemon's pid namespace, so a run in
its own namespace, e.g. under `bwrap --unshare-pid`, still shows as a descendant of the process the
engine started); `/proc/<pid>/status` gives each parent. Nothing here trusts what the peer says.
"""

from __future__ import annotations

import os
import socket
import struct

MAX_DEPTH = 64  # deeper than any real process tree; stops a walk that a race could make loop


def peer_pid(sock: socket.socket) -> int | None:
    """The pid of the process that connected to this Unix socket (None where the OS cannot tell)."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return None
    try:
        pid, _uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i")))
    except OSError:
        return None
    return pid or None


def cwd_of(pid: int) -> str | None:
    """The folder the process runs in (a person's client started its plugin there), where the OS says."""
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return None


def parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8", errors="replace") as status:
            for line in status:
                if line.startswith("PPid:"):
                    return int(line.split()[1]) or None
    except (OSError, ValueError, IndexError):
        return None
    return None


def lineage(pid: int) -> list[int]:
    """`pid`, its parent, its parent's parent… up to the first process (1)."""
    chain = [pid]
    while len(chain) < MAX_DEPTH and (parent := parent_of(chain[-1])) is not None and parent not in chain:
        chain.append(parent)
    return chain
