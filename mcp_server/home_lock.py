"""The lock that makes one daemon per AGENTQUEUE_HOME (stdlib only: the CLI probes it without loading the daemon).

An exclusive `flock` on `<home>/daemon.lock`, held for the daemon's lifetime and released by the
kernel if it dies. Probing takes the lock for an instant, so a daemon starting at that very moment
would see it taken: taking it therefore retries for a short grace period before giving up.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

from . import paths

# Longer than any probe holds the lock; short enough that a second `serve` still refuses at once.
GRACE_SECONDS = 0.5


class AlreadyRunningError(RuntimeError):
    """Another daemon holds this home's lock."""


@contextlib.contextmanager
def hold(home: Path, describe_holder: str = "", grace: float = GRACE_SECONDS) -> Iterator[None]:
    """Hold the home's lock for the block; AlreadyRunningError if another process keeps it past `grace`."""
    home.mkdir(parents=True, exist_ok=True)
    fd = os.open(paths.lock_path(home), os.O_RDWR | os.O_CREAT, 0o600)
    deadline = time.monotonic() + grace
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except OSError as error:
            if error.errno not in (errno.EAGAIN, errno.EACCES):
                os.close(fd)
                raise
            if time.monotonic() >= deadline:
                os.close(fd)
                raise AlreadyRunningError(
                    f"An AgentQueue daemon is already running for {home}{describe_holder}. "
                    "Use it (agentqueue mcp connects to it), or stop it first with `agentqueue stop`."
                ) from None
            time.sleep(0.01)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def is_held(home: Path) -> bool:
    """True while a daemon holds the lock (probes with a shared lock, for an instant)."""
    try:
        fd = os.open(paths.lock_path(home), os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)
