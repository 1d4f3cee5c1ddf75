"""The running daemon's code against the code installed here: its version, its store's schema, its walls.

A daemon keeps the code it started with: `pip install -U agentqueue` (or a `git pull` in a checkout) changes what the
terminal runs, not what the daemon runs, until `agentqueue restart-daemon`. daemon.json says which code the daemon
runs (`version`, `schema`, `walls`); a daemon from before issue 34 says only its version. The terminal process is the
installed code (it was just started from it), so "installed" is this process's own version. Stdlib only: `status`
and the reads use it.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import paths
from ..version import release_tuple, version
from ..walls import lacking

OLDER = "the daemon runs older code than the one installed; run `agentqueue restart-daemon`"
NEWER = ("the daemon runs newer code than the one installed; install that AgentQueue again (pip install -U "
         "agentqueue): a restart would run the installed, older code, which refuses a store the newer one migrated "
         "(going back: docs/upgrading.md)")


@dataclass
class DaemonCode:
    """What a running daemon runs, next to what is installed."""

    pid: int | None
    version: str  # what the daemon said it runs ("" when it said nothing)
    installed: str
    relation: str  # same | older | newer
    schema: int | None  # its store's schema version, when known
    lacking: list[str] = field(default_factory=list)  # walls of the installed code the running daemon lacks

    def advice(self) -> str | None:
        """The sentence `status` and `doctor` print when the daemon does not run the installed code."""
        if self.relation == "same":
            return None
        said = f"AgentQueue {self.version}" if self.version else "a version too old to say which"
        lead = OLDER if self.relation == "older" else NEWER
        return f"{lead[0].upper()}{lead[1:]} (the daemon, pid {self.pid}, runs {said}; installed: {self.installed})."

    def as_json(self) -> dict[str, Any]:
        return {"version": self.version or None, "installed": self.installed, "relation": self.relation,
                "schema": self.schema, "lacking_walls": self.lacking, "advice": self.advice()}


def relation(running: str, installed: str) -> str:
    """same, older or newer: by the numeric release first; the same release built from another commit (a checkout
    that moved on, a rebuild) is older, the usual case of a daemon started before the code changed."""
    if running == installed:
        return "same"
    if not running:
        return "older"
    return "newer" if release_tuple(running) > release_tuple(installed) else "older"


def running_code(home: Path, info: dict[str, Any]) -> DaemonCode:
    """What the daemon of daemon.json `info` runs, against this process's code."""
    running = str(info.get("version") or "")
    installed = version()
    schema = info.get("schema")
    return DaemonCode(pid=info.get("pid"), version=running, installed=installed, relation=relation(running, installed),
                      schema=int(schema) if isinstance(schema, int) else store_schema(home),
                      lacking=lacking(info.get("walls")))


def store_schema(home: Path) -> int | None:
    """The SQLite store's schema version, read without changing anything (None: no file, or not readable)."""
    path = paths.db_path(home)
    if not path.exists():
        return None
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=5)
        try:
            return int(conn.execute("PRAGMA user_version").fetchone()[0])
        finally:
            conn.close()
    except sqlite3.Error:
        return None


def held_store(home: Path, found: int, expected: int) -> str:
    """A command that would have to migrate the store, refused while a daemon holds it: why, and what to do."""
    from ..daemon_client import running_daemon

    info = running_daemon(home) or {}
    code = running_code(home, info)
    said = f"AgentQueue {code.version}" if code.version else "older code"
    return (f"{OLDER[0].upper()}{OLDER[1:]}: the daemon (pid {info.get('pid', '?')}) runs {said}, whose store is at "
            f"schema version {found}, and the installed {code.installed} reads schema {expected}. The store is left "
            "as it is while that daemon runs; `agentqueue restart-daemon` restarts it on the installed code, which "
            "keeps a copy of the store and migrates it, then this command works.")
