"""Where AgentQueue keeps its files under AGENTQUEUE_HOME (stdlib only: the plugin imports it)."""

from __future__ import annotations

import hashlib
import os
import stat
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


def task_log(root: Path, task_id: str) -> Path:
    """A task's agent output, appended by every run."""
    return root / "logs" / "tasks" / f"{task_id}.log"


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


def restart_record(root: Path) -> Path:
    """When the last restart finished (epoch seconds): a plugin that noticed its connection drop only
    after the new daemon was up (and the marker gone) still knows to reconnect."""
    return root / "restarted"


def socket_path(root: Path) -> Path:
    """The daemon's Unix socket: inside the home unless that path is too long for AF_UNIX, then in this
    user's private runtime folder (never a predictable name in a folder other users can write to)."""
    candidate = root / "agentqueue.sock"
    if len(str(candidate)) <= _MAX_SOCKET_PATH:
        return candidate
    digest = hashlib.sha256(str(root).encode()).hexdigest()[:16]
    return runtime_dir() / f"{digest}.sock"


class UnsafeRuntimeDir(RuntimeError):
    """The folder for the socket exists but is not this user's private folder."""


def runtime_dir() -> Path:
    """`$XDG_RUNTIME_DIR/agentqueue`, else `<tmp>/agentqueue-<uid>`: created 0700, and checked to be a real
    folder owned by this user that nobody else can enter (another user may have made it first)."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    uid = os.getuid()
    if base and os.path.isdir(base) and os.stat(base).st_uid == uid:
        folder = Path(base) / "agentqueue"
    else:
        folder = Path(tempfile.gettempdir()) / f"agentqueue-{uid}"
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid or info.st_mode & 0o077:
        raise UnsafeRuntimeDir(f"{folder} is not a private folder of this user (another user or program made "
                               "it); AgentQueue will not put its socket there. Remove it, or use a shorter "
                               "AGENTQUEUE_HOME path so the socket fits inside the home.")
    return folder


def private_dir(path: Path) -> Path:
    """Create `path` (and parents) and make it 0700: AgentQueue's home holds keys, transcripts and the token."""
    path.mkdir(parents=True, exist_ok=True)
    if stat.S_IMODE(path.stat().st_mode) != 0o700:
        os.chmod(path, 0o700)
    return path


def private_file(path: Path) -> Path:
    """Create `path` 0600 if it is missing (before anything writes it with the default mode)."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
    return path
