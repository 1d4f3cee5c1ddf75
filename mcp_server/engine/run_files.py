"""Reading a file a run could have written (a rollout, a usage file) without letting the run steer the read.

A run may put a FIFO, a device, a symlink or a huge file where the daemon expects its output; opened plainly on
the event loop, a FIFO blocks every MCP call and /dev/zero never ends. So: never follow a final symlink, never
block on open, regular files only, at most `limit` bytes (the file's end, where the latest figures are), and
callers do it in a worker thread.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

MAX_BYTES = 32 * 1024 * 1024  # far above any real session's rollout; a bigger file is read from its end


def read_tail(path: Path, limit: int = MAX_BYTES) -> bytes | None:
    """The last `limit` bytes of `path` if it is a regular file (a cut first line dropped), else None."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None  # gone, a symlink (ELOOP), or unreadable: no figure rather than a stuck daemon
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        start = max(0, info.st_size - limit)
        chunks: list[bytes] = []
        got = 0
        while got < limit:
            chunk = os.pread(fd, min(1 << 20, limit - got), start + got)
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        data = b"".join(chunks)
        if start > 0:
            data = data.partition(b"\n")[2]  # the first line began before the cut
        return data
    except OSError:
        return None
    finally:
        os.close(fd)
