"""Host Unix sockets a run would otherwise reach, closed at each sandbox start (issue 33, L2).

A read-only mount does not stop `connect()`: a socket file under the sandbox's `--ro-bind / /` accepts a run's
connection as it accepts the host's. So before each start the daemon lists the sockets bound to a path in its network
namespace (sock_diag over netlink; `/proc/net/unix` where the kernel has no `unix_diag`), keeps those whose file the run
would see (not under the private /tmp, /var/tmp, /run or a covered secret, unless a folder bound back shows it), under
every name the host's mounts give that file, and bubblewrap binds /dev/null over each: inside, the name is a character
device, so `connect()` and `sendto()` get ECONNREFUSED, and the mount cannot be undone (no capabilities).

What holds and what does not (docs/design.md, "Host sockets"): a socket bound after the run started, bound in another
network namespace (a container's, a sandboxed run's), bound by a relative path, or reached through a hard link of its
file is not in this list and stays reachable where the run sees it.
"""

from __future__ import annotations

import os
import re
import socket
import stat
import struct
from collections.abc import Iterable, Iterator
from pathlib import Path

# sock_diag (linux/sock_diag.h, linux/unix_diag.h)
NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
UDIAG_SHOW_NAME, UNIX_DIAG_NAME = 0x1, 0
# A stream or seqpacket socket that listens, or a datagram socket bound and unconnected: what takes a connection or a
# datagram from anyone. Accepted connections carry the listener's name too, and are not asked for.
TCP_ESTABLISHED, TCP_CLOSE, TCP_LISTEN = 1, 7, 10
STATES = (1 << TCP_LISTEN) | (1 << TCP_CLOSE)
_HEADER = struct.Struct("=IHHII")  # nlmsghdr
_REQUEST = struct.Struct("=BBHIIIII")  # unix_diag_req
_DIAG_MSG = 16  # sizeof(struct unix_diag_msg)
_ATTR = struct.Struct("=HH")  # rtattr
# /proc/net/unix: "Num: RefCount Protocol Flags Type St Inode Path"; no field before the path holds a slash.
_TABLE_PATH = re.compile(rb" (/[^\n]*)")
_OCTAL = re.compile(r"\\([0-7]{3})")


def bound() -> set[str]:
    """The absolute paths sockets of this network namespace are bound to and take connections or datagrams on
    (abstract names and relative paths are not paths the run can name)."""
    try:
        return _diag()
    except OSError:
        return _table()


def _diag() -> set[str]:
    found: set[str] = set()
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG) as link:
        request = _REQUEST.pack(socket.AF_UNIX, 0, 0, STATES, 0, UDIAG_SHOW_NAME, 0, 0)
        link.send(_HEADER.pack(_HEADER.size + len(request), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, 1, 0)
                  + request)
        while True:
            data = link.recv(1 << 16)
            if not data:
                raise OSError("sock_diag ended without an answer")
            offset = 0
            while offset + _HEADER.size <= len(data):
                length, message = _HEADER.unpack_from(data, offset)[:2]
                if message == NLMSG_DONE:
                    return found
                if message == NLMSG_ERROR or length < _HEADER.size + _DIAG_MSG:
                    raise OSError("sock_diag refused the request")
                end = offset + length
                kind, state = data[offset + _HEADER.size + 1], data[offset + _HEADER.size + 2]
                # CLOSE is also a bound stream socket that never listened: it takes nothing
                at = offset + _HEADER.size + _DIAG_MSG if state == TCP_LISTEN or kind == socket.SOCK_DGRAM else end
                while at + _ATTR.size <= end:
                    size, attr = _ATTR.unpack_from(data, at)
                    if size < _ATTR.size:
                        break
                    if attr == UNIX_DIAG_NAME and data[at + 4:at + 5] == b"/":
                        found.add(os.fsdecode(data[at + 4:at + size].split(b"\0", 1)[0]))
                    at += (size + 3) & ~3
                offset += (length + 3) & ~3


def _table() -> set[str]:
    try:
        with open("/proc/net/unix", "rb") as table:
            data = table.read()
    except OSError:
        return set()
    return {os.fsdecode(path) for path in _TABLE_PATH.findall(data)}


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _mounts() -> list[tuple[int, str, str]]:
    """(device, root inside its filesystem, mount point) of each mount the daemon sees, in mount order."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as table:
            lines = table.read().splitlines()
    except OSError:
        return []
    def unescape(text: str) -> str:
        return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), text)
    found = []
    for fields in (line.split(" ", 5) for line in lines):
        major, _, minor = fields[2].partition(":") if len(fields) > 5 else ("", "", "")
        if major.isdigit() and minor.isdigit():
            found.append((os.makedev(int(major), int(minor)), unescape(fields[3]), unescape(fields[4])))
    return found


def names(path: str, seen: os.stat_result, mounts: list[tuple[int, str, str]]) -> list[str]:
    """`path` (a real path, whose lstat is `seen`), and where the same file shows through another mount of its
    filesystem (a bind mount of a folder above it, or of the file itself), each checked to be the same inode."""
    found = [path]
    holding = [m for m in mounts if _under(path, m[2])]
    if not holding:
        return found
    device, root, point = max(reversed(holding), key=lambda m: len(m[2]))  # the deepest; the last mounted on a tie
    inside = os.path.join(root, os.path.relpath(path, point)) if path != point else root
    for other_device, other_root, other_point in mounts:
        if other_device != device or other_point == point or not _under(inside, other_root):
            continue
        alias = os.path.normpath(os.path.join(other_point, os.path.relpath(inside, other_root)))
        try:
            other = os.lstat(alias)
        except OSError:
            continue
        if (other.st_dev, other.st_ino) == (seen.st_dev, seen.st_ino) and alias not in found:
            found.append(alias)
    return found


def to_close(shown: Iterable[Path], covered: Iterable[Path], reachable: Iterable[Path]) -> list[str]:
    """The socket files a run would see: under a folder bound back into it (`shown`), or under no folder it gets
    empty (`covered`); never one the run is given (`reachable`: the daemon's socket, the run's own bridge folder)."""
    sockets = []
    for path in sorted(bound()):
        try:
            seen = os.lstat(path)
        except OSError:  # gone: nothing to connect to
            continue
        if stat.S_ISSOCK(seen.st_mode):
            sockets.append((path, seen))
    if not sockets:
        return []
    show, cover, given = _RealPaths(shown), _RealPaths(covered), _RealPaths(reachable)
    mounts = _mounts()
    counts: dict[int, int] = {}
    for device, _root, _point in mounts:
        counts[device] = counts.get(device, 0) + 1
    real_folders: dict[str, str] = {}  # sockets share few folders: each is resolved and judged once
    seen_by_run: dict[str, bool] = {}
    closed: list[str] = []
    for path, seen in sockets:
        folder, name = os.path.split(path)
        if folder not in real_folders:
            real_folders[folder] = os.path.realpath(folder)
        real = os.path.join(real_folders[folder], name)
        # Only a filesystem mounted more than once (or one mountinfo names by another device: btrfs) has aliases.
        for each in names(real, seen, mounts) if counts.get(seen.st_dev, 2) > 1 else [real]:
            where = os.path.dirname(each)
            if where not in seen_by_run:
                shows = not any(_under(where, c) for c in cover) or any(_under(where, s) for s in show)
                seen_by_run[where] = shows and not any(_under(where, g) for g in given)
            if seen_by_run[where] and each not in closed and each not in given:
                closed.append(each)
    return closed


class _RealPaths:
    """The real paths of `paths`, each resolved when a check first gets that far: most sockets stop at /tmp or /run."""

    def __init__(self, paths: Iterable[Path]) -> None:
        self._left = iter(paths)
        self._done: list[str] = []

    def __iter__(self) -> Iterator[str]:
        yield from self._done
        for path in self._left:
            self._done.append(os.path.realpath(path))
            yield self._done[-1]
