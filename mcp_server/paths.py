"""Where AgentQueue keeps its files under AGENTQUEUE_HOME (stdlib only: the plugin imports it).

Every MCP client launch runs the plugin, which needs only the home and the socket to relay: those
have str forms (`home_dir`, `socket_file`) and nothing else is imported at the top, so a launch
against a running daemon never loads `pathlib` (~5 ms of a ~25 ms start), nor `hashlib` (OpenSSL,
~4 MiB) and `tempfile`, which serve only a home whose socket path is too long. Every other function
takes the home as a Path or a str and returns a Path (pathlib is imported on first use).
"""

from __future__ import annotations

import os
import stat
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers read this name)
if TYPE_CHECKING:
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


def as_path(root: str | Path) -> Path:
    """`root` as a Path (the plugin holds its home as a str; see the module's docstring)."""
    from pathlib import Path

    return root if isinstance(root, Path) else Path(root)


def _default_home_dir() -> str:
    user = os.path.expanduser("~")
    if sys.platform == "darwin":
        return os.path.join(user, "Library", "Application Support", "agentqueue")
    if sys.platform == "win32":
        return os.path.join(os.environ.get("LOCALAPPDATA") or os.path.join(user, "AppData", "Local"), "agentqueue")
    return os.path.join(os.environ.get("XDG_DATA_HOME") or os.path.join(user, ".local", "share"), "agentqueue")


def default_home() -> Path:
    """The platform's user data dir for AgentQueue."""
    return as_path(_default_home_dir())


def home_dir() -> str:
    """AGENTQUEUE_HOME if set, else the platform default; absolute, symlinks resolved: `home()` as a str."""
    value = os.environ.get("AGENTQUEUE_HOME")
    return os.path.realpath(os.path.expanduser(value) if value else _default_home_dir())


def home() -> Path:
    """AGENTQUEUE_HOME if set, else the platform default; always absolute."""
    return as_path(home_dir())


def db_path(root: str | Path) -> Path:
    return as_path(root) / "agentqueue.db"


def logs_dir(root: str | Path) -> Path:
    return as_path(root) / "logs"


def task_log(root: str | Path, task_id: str) -> Path:
    """A task's agent output, appended by every run."""
    return as_path(root) / "logs" / "tasks" / f"{task_id}.log"


def workspaces_dir(root: str | Path) -> Path:
    return as_path(root) / "workspaces"


def token_path(root: str | Path) -> Path:
    return as_path(root) / "token"


def lock_path(root: str | Path) -> Path:
    return as_path(root) / "daemon.lock"


def daemon_info_path(root: str | Path) -> Path:
    """JSON written by the running daemon: pid, socket, http url."""
    return as_path(root) / "daemon.json"


def restart_marker(root: str | Path) -> Path:
    """Present while a daemon re-executes itself: plugins reconnect instead of exiting."""
    return as_path(root) / "restarting"


def restart_record(root: str | Path) -> Path:
    """When the last restart finished (epoch seconds): a plugin that noticed its connection drop only
    after the new daemon was up (and the marker gone) still knows to reconnect."""
    return as_path(root) / "restarted"


def socket_file(root: str | Path) -> str:
    """The daemon's Unix socket: inside the home unless that path is too long for AF_UNIX, then in this
    user's private runtime folder (never a predictable name in a folder other users can write to)."""
    candidate = os.path.join(root, "agentqueue.sock")
    if len(candidate) <= _MAX_SOCKET_PATH:
        return candidate
    import hashlib  # the rare long home only: see the module's docstring

    digest = hashlib.sha256(os.fspath(root).encode()).hexdigest()[:16]
    return os.path.join(_runtime_folder(), f"{digest}.sock")


def socket_path(root: str | Path) -> Path:
    """`socket_file` as a Path."""
    return as_path(socket_file(root))


class UnsafeRuntimeDir(RuntimeError):
    """The folder for the socket exists but is not this user's private folder."""


def runtime_dir() -> Path:
    """`$XDG_RUNTIME_DIR/agentqueue`, else `<tmp>/agentqueue-<uid>`: created 0700, and checked to be a real
    folder owned by this user that nobody else can enter (another user may have made it first)."""
    return as_path(_runtime_folder())


def _runtime_folder() -> str:
    base = os.environ.get("XDG_RUNTIME_DIR")
    uid = os.getuid()
    if base and os.path.isdir(base) and os.stat(base).st_uid == uid:
        folder = os.path.join(base, "agentqueue")
    else:
        import tempfile  # the rare long home only: see the module's docstring

        folder = os.path.join(tempfile.gettempdir(), f"agentqueue-{uid}")
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
