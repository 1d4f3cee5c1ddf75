"""File locks (flock) that hold across threads and processes: for work that checks, then creates."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive flock on `path` (created 0600, never through a link); closing releases it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def folder_lock(folder: Path) -> AbstractContextManager[None]:
    """An exclusive lock on a folder, as `.<name>.lock` beside it (so it never shows in the folder)."""
    folder.mkdir(parents=True, exist_ok=True)
    return file_lock(folder.parent / f".{folder.name}.lock")
