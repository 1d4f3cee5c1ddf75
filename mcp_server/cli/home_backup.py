"""A home's backup set: what `agentqueue backup` copies and how `agentqueue restore` puts it back.

A set is a folder: `agentqueue.db` (the store, as of one commit: SQLite's online backup, so the daemon may run and
write meanwhile), `config.toml`, `policy.toml` and `token` when the home has them (each mode 0600: config.toml may
hold keys in [agent_env]), and `backup.json` (the version and schema that wrote it, when, each file's size and
sha256). A team's PostgreSQL database is not in it: that is pg_dump's job. Not in it either: logs, worktrees (a task's
work is on its branch in the repo) and workspaces/ (scratch folders and notes).

Restoring replaces the store as a whole and never copies a file over a live one: a WAL store copied over another
store's -wal file is corrupt when it opens. So restore holds the home's lock (no daemon can start meanwhile), keeps
a consistent copy of the current store and the current files beside them (`*.before-restore.<time>*`), removes the
store with its -wal and -shm, and writes the backup's store in their place.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import paths
from ..store.backup import copy_store, stamp
from ..version import version

FILES = ("config.toml", "policy.toml", "token")  # beside the store, each kept 0600
MANIFEST = "backup.json"
STORE = "agentqueue.db"


class BackupError(RuntimeError):
    """The backup or restore cannot be done; the message says why and what to do."""


@dataclass
class Made:
    folder: Path
    schema: int | None  # None: the store is a team's PostgreSQL database (not copied)
    tasks: int | None
    files: list[str]


def default_folder(home: Path) -> Path:
    return home / "backups" / stamp()


def make(home: Path, folder: Path, database_url: str | None) -> Made:
    """Copy the home's store and files into `folder` (new, or empty), consistently while a daemon runs."""
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise BackupError(f"{folder} exists and is not an empty folder: name a new one (agentqueue backup PATH).")
    store = paths.db_path(home)
    if not database_url and not store.exists():
        raise BackupError(f"No AgentQueue store in {home} to back up.")
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(folder, 0o700)
    schema = tasks = None
    copied = []
    if not database_url:
        try:
            schema = copy_store(store, folder / STORE)
            tasks, check = _inspect(folder / STORE)
        except (OSError, sqlite3.Error) as error:
            raise BackupError(f"Could not copy the store {store} into {folder} ({error}): free space there, or name "
                              "another folder.") from None
        if check != "ok":
            raise BackupError(f"The copy of {store} fails SQLite's check ({check}): the store itself is damaged; "
                              f"keep {folder} and the store as they are, and restore an older backup.")
        copied.append(STORE)
    for name in FILES:
        if (home / name).is_file():
            _private_copy(home / name, folder / name)
            copied.append(name)
    manifest = {"agentqueue": version(), "schema": schema, "backend": "postgres" if database_url else "sqlite",
                "created_at": stamp(), "home": str(home),
                "files": {name: {"bytes": (folder / name).stat().st_size, "sha256": _sha256(folder / name)}
                          for name in copied}}
    _private_write(folder / MANIFEST, json.dumps(manifest, indent=2) + "\n")
    return Made(folder, schema, tasks, copied)


def describe(source: Path) -> dict[str, Any]:
    """What a backup holds (a set's folder, or one store file such as a migration's copy), checked: its store must be
    whole and of a schema this AgentQueue reads."""
    from ..store.reader import SCHEMA_VERSION

    store = source if source.is_file() else source / STORE
    if not store.is_file():
        raise BackupError(f"{source} is neither a backup folder (agentqueue backup makes one) nor a store file.")
    files = [] if source.is_file() else [name for name in FILES if (source / name).is_file()]
    try:
        schema = _schema(store)
        tasks, check = _inspect(store)
    except sqlite3.Error as error:
        raise BackupError(f"{store} is not a usable AgentQueue store ({error}).") from None
    if check != "ok":
        raise BackupError(f"{store} fails SQLite's check ({check}): choose another backup.")
    if schema > SCHEMA_VERSION:
        raise BackupError(f"{store} has schema version {schema}, newer than this AgentQueue ({version()}) reads "
                          f"({SCHEMA_VERSION}): restore it with the AgentQueue that made it.")
    manifest = {}
    if source.is_dir() and (source / MANIFEST).is_file():
        manifest = json.loads((source / MANIFEST).read_text())
    return {"store": store, "schema": schema, "tasks": tasks, "files": files, "manifest": manifest}


def restore(home: Path, held: dict[str, Any]) -> list[Path]:
    """Put the backup `held` (from describe) in place of the home's store and files; the home's lock must be held.
    Returns what was kept of the home as it was."""
    when = stamp()
    kept: list[Path] = []
    store = paths.db_path(home)
    if store.exists():
        aside = store.with_name(f"{store.stem}.before-restore.{when}.db")
        try:
            copy_store(store, aside)
        except (OSError, sqlite3.Error) as error:
            raise BackupError(f"Could not keep a copy of the current store {store} ({error}), so nothing was "
                              "restored: free space beside it, then try again.") from None
        kept.append(aside)
    home.mkdir(parents=True, exist_ok=True)
    incoming = store.with_name(f".{store.name}.restoring")
    incoming.unlink(missing_ok=True)
    try:
        copy_store(held["store"], incoming)
    except (OSError, sqlite3.Error) as error:
        incoming.unlink(missing_ok=True)
        raise BackupError(f"Could not copy {held['store']} into {home} ({error}); nothing was restored.") from None
    for suffix in ("", "-wal", "-shm"):
        Path(f"{store}{suffix}").unlink(missing_ok=True)
    os.replace(incoming, store)
    source = Path(held["store"]).parent
    for name in held["files"]:
        target = home / name
        if target.exists():
            aside = target.with_name(f"{name}.before-restore.{when}")
            os.replace(target, aside)
            kept.append(aside)
        _private_copy(source / name, target)
    return kept


def _inspect(store: Path) -> tuple[int | None, str]:
    """(its task count, quick_check's verdict) of a store file, read only."""
    conn = sqlite3.connect(f"{store.resolve().as_uri()}?mode=ro", uri=True)
    try:
        check = str(conn.execute("PRAGMA quick_check").fetchone()[0])
        has_tasks = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'tasks'").fetchone()
        tasks = int(conn.execute("SELECT count(*) FROM tasks").fetchone()[0]) if has_tasks else None
        return tasks, check
    finally:
        conn.close()


def _schema(store: Path) -> int:
    conn = sqlite3.connect(f"{store.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    finally:
        conn.close()


def _private_copy(source: Path, target: Path) -> None:
    partial = target.with_name(f".{target.name}.partial")
    partial.unlink(missing_ok=True)
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out, source.open("rb") as data:
        shutil.copyfileobj(data, out)
        out.flush()
        os.fsync(out.fileno())
    os.replace(partial, target)


def _private_write(target: Path, text: str) -> None:
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as data:
        for chunk in iter(lambda: data.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
