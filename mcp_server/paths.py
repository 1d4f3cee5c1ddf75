"""Where AgentQueue keeps its files under AGENTQUEUE_HOME (stdlib only: the plugin imports it)."""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from pathlib import Path

# AF_UNIX paths are limited to ~104-108 bytes; longer homes get a socket in the temp dir.
_MAX_SOCKET_PATH = 100

# `agentqueue serve` exits with this when another daemon holds the home (a lost start race, not a failure).
EXIT_ALREADY_RUNNING = 3
# ... and with this when it cannot start at all (bad config, unreadable database): its stderr says why.
EXIT_CANNOT_START = 2


def self_command(*args: str) -> list[str]:
    """How to run this AgentQueue again: `-P` keeps the caller's cwd off sys.path, so a folder there can't shadow it."""
    return [sys.executable, "-P", "-m", "agentqueue", *args]


def default_home() -> Path:
    """The platform's user data dir for AgentQueue."""
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / "agentqueue"
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(base) / "agentqueue"
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "agentqueue"


def home() -> Path:
    """AGENTQUEUE_HOME if set, else the platform default; always absolute."""
    value = os.environ.get("AGENTQUEUE_HOME")
    return (Path(value).expanduser() if value else default_home()).resolve()


def db_path(root: Path) -> Path:
    return root / "agentqueue.db"


def logs_dir(root: Path) -> Path:
    return root / "logs"


def workspaces_dir(root: Path) -> Path:
    return root / "workspaces"


def token_path(root: Path) -> Path:
    return root / "token"


def lock_path(root: Path) -> Path:
    return root / "daemon.lock"


def daemon_info_path(root: Path) -> Path:
    """JSON written by the running daemon: pid, socket, http url."""
    return root / "daemon.json"


def restart_marker(root: Path) -> Path:
    """Present while a daemon re-executes itself: plugins reconnect instead of exiting."""
    return root / "restarting"


def socket_path(root: Path) -> Path:
    """The daemon's Unix socket: inside the home unless that path is too long for AF_UNIX."""
    candidate = root / "agentqueue.sock"
    if len(str(candidate)) <= _MAX_SOCKET_PATH:
        return candidate
    digest = hashlib.sha256(str(root).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"agentqueue-{digest}.sock"
