"""Consistent copies of the SQLite store, made with SQLite's online backup API (stdlib only).

Two uses: the copy a migration takes before it changes anything, kept beside the store and named by the schema
version it holds (`agentqueue.schema-11.20261202T134135Z.db`: what the AgentQueue that wrote it can read again), and
`agentqueue backup`. `sqlite3.Connection.backup` copies every page in one step, inside one read transaction: the
copy is the store as of one commit, and in WAL mode the daemon's writers go on meanwhile. A copy is written under a
temporary name, switched to a rollback journal (one self-contained file, no -wal beside it), flushed to disk and
only then renamed: a copy that exists under its name is whole.
"""

from __future__ import annotations

import os
import re
import secrets
import sqlite3
import time
from pathlib import Path

_NAMED = re.compile(r"\.schema-(\d+)\.(\d{8}T\d{6}Z)(?:-\d+)?\.db$")


def stamp() -> str:
    """Now, UTC, as a file name can hold it: 20261202T134135Z."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())


def copy_store(source: sqlite3.Connection | Path, target: Path) -> int:
    """A consistent copy of `source` (a connection, or the path of a store to open for reading) at `target` (mode
    0600); returns the schema version the copy holds. Raises sqlite3.Error or OSError (a full disk, an unreadable
    store; FileExistsError: `target` exists) with nothing left behind."""
    partial = target.with_name(f".{target.name}.partial-{secrets.token_hex(6)}")
    os.close(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    opened = None
    try:
        if isinstance(source, Path):
            opened = sqlite3.connect(f"{source.resolve().as_uri()}?mode=rw", uri=True, timeout=30)
            opened.execute("PRAGMA query_only = ON")  # a reader: it never writes the store it copies
            source = opened
        copy = sqlite3.connect(str(partial))
        try:
            source.backup(copy)
            copy.execute("PRAGMA journal_mode = DELETE")
            schema = int(copy.execute("PRAGMA user_version").fetchone()[0])
        finally:
            copy.close()
        with open(partial, "rb+") as flushed:
            os.fsync(flushed.fileno())
        _place(partial, target)
        return schema
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    finally:
        if opened is not None:
            opened.close()


def _place(partial: Path, target: Path) -> None:
    """`partial` renamed to `target`, never over another copy (FileExistsError), whoever made it meanwhile: a hard
    link where the file system has them, else a rename after a check."""
    try:
        os.link(partial, target)
    except FileExistsError:
        raise
    except OSError:  # no hard links here (some network and FUSE file systems)
        if target.exists():
            raise FileExistsError(f"{target} exists") from None
        os.replace(partial, target)
        return
    partial.unlink()


def migration_backup(store: Path, schema: int) -> Path:
    """Where the copy taken before migrating `store` from `schema` goes: beside it, named by the version and the
    time (a second copy within the same second gets a counter)."""
    when = stamp()
    target = store.with_name(f"{store.stem}.schema-{schema}.{when}.db")
    counter = 1
    while target.exists():
        counter += 1
        target = store.with_name(f"{store.stem}.schema-{schema}.{when}-{counter}.db")
    return target


def migration_backups(store: Path) -> list[tuple[int, Path]]:
    """The copies kept beside `store` before its migrations: (schema version, path), oldest schema first, then by
    time."""
    found = []
    for path in store.parent.glob(f"{store.stem}.schema-*.db"):
        named = _NAMED.search(path.name)
        if named and path.name.startswith(f"{store.stem}.schema-"):
            found.append((int(named.group(1)), named.group(2), path))
    return [(schema, path) for schema, _when, path in sorted(found)]
