"""MCP clients' config files: where each keeps it, reading it, and merging our entry in (or taking it out).

The entry names this install's own `agentqueue` script by absolute path (never the base
interpreter a venv's python symlink resolves to), so it runs from any cwd and under a GUI
client's minimal PATH. Configs are merged, the old file is backed up with its mode (a 0600
~/.claude.json stays 0600), JSONC is read where the client allows it, and Claude Code's own
`claude mcp add-json` is preferred to editing ~/.claude.json under a running Claude Code.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import paths
from . import jsonc

if TYPE_CHECKING:
    import subprocess

CLIENTS = ("claude-desktop", "claude-code", "cursor", "vscode")
JSONC_CLIENTS = ("cursor", "vscode")  # these clients accept comments and trailing commas in their config
SERVER_NAME = "agentqueue"
NAMES = {"claude-desktop": "Claude Desktop", "claude-code": "Claude Code", "cursor": "Cursor", "vscode": "VS Code"}


def config_path(client: str) -> Path:
    home = Path.home()
    if client == "claude-desktop":
        if sys.platform == "darwin":
            return home / "Library" / "Application Support" / "Claude" / "claude_desktop_config.json"
        if sys.platform == "win32":
            return Path(os.environ.get("APPDATA", home)) / "Claude" / "claude_desktop_config.json"
        return Path(os.environ.get("XDG_CONFIG_HOME", home / ".config")) / "Claude" / "claude_desktop_config.json"
    if client == "claude-code":
        return home / ".claude.json"  # user scope: top-level mcpServers
    if client == "cursor":
        return home / ".cursor" / "mcp.json"
    if sys.platform == "darwin":
        return home / "Library" / "Application Support" / "Code" / "User" / "mcp.json"
    if sys.platform == "win32":
        return Path(os.environ.get("APPDATA", home)) / "Code" / "User" / "mcp.json"
    return Path(os.environ.get("XDG_CONFIG_HOME", home / ".config")) / "Code" / "User" / "mcp.json"


def servers_key(client: str) -> str:
    return "servers" if client == "vscode" else "mcpServers"


# -- the command a client runs ----------------------------------------------------------------------
def _is_our_script(path: str) -> bool:
    """Our `agentqueue` script as pip installed it (bin/agentqueue, or an older install's console script for
    `agentqueue.cli:main`), not, say, `python -m agentqueue`'s __main__.py."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(4096)
    except OSError:
        return False
    return b"agentqueue.cli" in head and os.access(path, os.X_OK)


def launch_command() -> list[str]:
    """The absolute argv prefix that runs this install's `agentqueue` (add "mcp" for the plugin).

    1. the `agentqueue` script beside sys.executable (a venv, pipx or uv tool install), unresolved:
       resolving would follow the venv's python symlink to the base interpreter, which lacks our packages;
    2. else sys.argv[0] when it is our script (e.g. `pip install --user` puts it in ~/.local/bin);
    3. else this interpreter with -P (the client's cwd can never shadow our package) -m agentqueue.
    """
    executable = os.path.abspath(sys.executable)
    name = "agentqueue.exe" if sys.platform == "win32" else "agentqueue"
    beside = os.path.join(os.path.dirname(executable), name)
    if os.path.isfile(beside) and os.access(beside, os.X_OK):
        return [beside]
    argv0 = sys.argv[0] if sys.argv else ""
    if argv0 and os.path.basename(argv0).startswith("agentqueue") and _is_our_script(argv0):
        return [os.path.abspath(argv0)]
    return [executable, "-P", "-m", "agentqueue"]


def server_entry(client: str, home: Path) -> dict[str, Any]:
    """Absolute command (GUI clients have a minimal PATH) and the home pinned in env."""
    command, *prefix = launch_command()
    entry: dict[str, Any] = {"command": command, "args": [*prefix, "mcp"], "env": {"AGENTQUEUE_HOME": str(home)}}
    if client in ("claude-code", "vscode"):
        entry = {"type": "stdio", **entry}
    return entry


# -- reading client configs -------------------------------------------------------------------------
@dataclass
class ClientConfig:
    client: str
    path: Path
    exists: bool = False
    data: dict[str, Any] = field(default_factory=dict)
    lossy: bool = False  # comments or trailing commas that a rewrite drops
    error: str | None = None

    @property
    def entry(self) -> dict[str, Any] | None:
        servers = self.data.get(servers_key(self.client))
        found = servers.get(SERVER_NAME) if isinstance(servers, dict) else None
        return found if isinstance(found, dict) else None

    def entry_home(self) -> Path | None:
        """The AGENTQUEUE_HOME our entry runs with (the platform default when its env sets none)."""
        entry = self.entry
        if entry is None:
            return None
        env = entry.get("env") if isinstance(entry.get("env"), dict) else {}
        value = env.get("AGENTQUEUE_HOME")
        return Path(value).expanduser().resolve() if value else paths.default_home().resolve()


def read_config(client: str, path: Path | None = None) -> ClientConfig:
    """Parse a client's config; JSONC only for the clients that accept it. Errors land in `.error`."""
    path = path or config_path(client)
    config = ClientConfig(client, path)
    if not path.exists():
        return config
    config.exists = True
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        config.error = f"cannot read {path}: {error.strerror}"
        return config
    if not text.strip():
        return config
    try:
        if client in JSONC_CLIENTS:
            data, config.lossy = jsonc.loads(text)
        else:
            data = json.loads(text)
    except ValueError as error:
        kind = "JSON (comments allowed)" if client in JSONC_CLIENTS else "JSON"
        config.error = f"{path} is not valid {kind} ({error})"
        return config
    if not isinstance(data, dict):
        config.error = f"{path} does not hold a JSON object"
        return config
    config.data = data
    return config


def configs_with_entry() -> list[ClientConfig]:
    """Every client config that has an AgentQueue entry."""
    return [config for client in CLIENTS if (config := read_config(client)).entry is not None]


def home_mismatches(home: Path) -> list[str]:
    """One sentence per client whose AgentQueue entry uses another AGENTQUEUE_HOME than `home`."""
    notes = []
    for config in configs_with_entry():
        other = config.entry_home()
        if other is not None and other != home.resolve():
            notes.append(f"{config.client} ({config.path}) uses AGENTQUEUE_HOME={other}, not {home}: it sees "
                         f"another queue. `agentqueue install {config.client}` points it here, or run the CLI "
                         f"with AGENTQUEUE_HOME={other}.")
    return notes


# -- writing ------------------------------------------------------------------------------------------
def _write_keeping_mode(path: Path, data: bytes, mode: int) -> None:
    """Write atomically with exactly `mode`: the file is never readable by others, not even for a moment."""
    tmp = path.with_name(f".{path.name}.agentqueue-tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def backup(path: Path) -> Path:
    """A copy beside the file, with the file's mode."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = path.with_name(f"{path.name}.bak-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.bak-{stamp}-{n}")
    mode = path.stat().st_mode & 0o777
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(path.read_bytes())
    os.chmod(target, mode)
    return target


def _claude_cli() -> str | None:
    """The `claude` the user's terminal runs (its AGENTQUEUE_CLAUDE_BIN override, else PATH)."""
    return shutil.which(os.environ.get("AGENTQUEUE_CLAUDE_BIN") or "claude")


def _run_claude(claude: str, *args: str) -> subprocess.CompletedProcess[str] | None:
    import subprocess

    try:
        return subprocess.run([claude, "mcp", *args], capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None


def install(client: str, home: Path, dry_run: bool = False, path: Path | None = None,
            remove: bool = False, use_claude_cli: bool = True) -> tuple[Path, str]:
    """Merge our entry into the client's config (or remove it); returns (path, what happened)."""
    explicit = path is not None
    path = path or config_path(client)
    config = read_config(client, path)
    if config.error:
        raise SystemExit(f"{config.error}; fix or move it, then run install again.")
    entry = None if remove else server_entry(client, home)
    if remove and config.entry is None:
        return path, f"{path} has no AgentQueue entry; nothing to do."
    if not remove and config.entry == entry:
        return path, f"{path} already has this AgentQueue entry; nothing to do."
    claude = _claude_cli() if client == "claude-code" and use_claude_cli and not explicit else None
    if claude:
        done = _install_with_claude(claude, config, entry, dry_run)
        if done is not None:
            return path, done
    return path, _edit_file(client, config, entry, dry_run)


def _install_with_claude(claude: str, config: ClientConfig, entry: dict[str, Any] | None,
                         dry_run: bool) -> str | None:
    """`claude mcp remove/add-json -s user`; None when the CLI failed (the caller edits the file instead)."""
    steps: list[list[str]] = []
    if config.entry is not None:
        steps.append(["remove", "-s", "user", SERVER_NAME])
    if entry is not None:
        steps.append(["add-json", "-s", "user", SERVER_NAME, json.dumps(entry)])
    if dry_run:
        return "Would run:\n" + "\n".join(f"  {claude} mcp {shlex.join(step)}" for step in steps)
    saved = backup(config.path) if config.path.exists() else None
    for step in steps:
        done = _run_claude(claude, *step)
        if done is None or done.returncode != 0:
            why = (done.stderr or done.stdout).strip() if done is not None else "it did not run"
            print(f"`claude mcp {step[0]}` failed ({why}); editing {config.path} instead.", file=sys.stderr)
            if saved is not None:
                saved.unlink(missing_ok=True)
            return None
    note = f" (previous file saved as {saved.name})" if saved else ""
    if entry is None:
        return f"Removed AgentQueue from {config.path} with `claude mcp remove -s user`{note}."
    return (f"Added AgentQueue to {config.path} with `claude mcp add-json -s user`{note}. "
            "Restart Claude Code to load it.")


def _edit_file(client: str, config: ClientConfig, entry: dict[str, Any] | None, dry_run: bool) -> str:
    path = config.path
    data = dict(config.data)
    key = servers_key(client)
    servers = data.get(key)
    if servers is not None and not isinstance(servers, dict):
        raise SystemExit(f"{path}: `{key}` is not an object; fix it, then run install again.")
    servers = dict(servers or {})
    if entry is None:
        servers.pop(SERVER_NAME, None)
    else:
        servers[SERVER_NAME] = entry
    data[key] = servers
    rendered = json.dumps(data, indent=2) + "\n"
    lossy = (f"\nNote: {path} had comments or trailing commas; the rewritten file drops them "
             "(the backup keeps the original).") if config.lossy else ""
    if dry_run:
        return f"Would write {path}:\n{rendered}" + lossy
    target = path.resolve() if path.is_symlink() else path  # keep a dotfiles symlink, write its target
    target.parent.mkdir(parents=True, exist_ok=True)
    note = ""
    if target.exists():
        mode = target.stat().st_mode & 0o777
        note = f" (previous file saved as {backup(target).name})"
    else:
        mode = 0o600 if client == "claude-code" else 0o644  # ~/.claude.json holds the user's credentials
    _write_keeping_mode(target, rendered.encode(), mode)
    if entry is None:
        return f"Removed AgentQueue from {path}{note}. Restart {NAMES[client]} to unload it." + lossy
    return f"Added AgentQueue to {path}{note}. Restart {NAMES[client]} to load it." + lossy

