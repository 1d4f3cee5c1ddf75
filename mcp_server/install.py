"""`agentqueue install <client>`: add AgentQueue to an MCP client's config (merged, old file backed up)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

CLIENTS = ("claude-desktop", "claude-code", "cursor", "vscode")


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


def server_entry(client: str, home: Path) -> dict[str, Any]:
    """Absolute command (GUI clients have a minimal PATH) and the home pinned in env."""
    script = shutil.which("agentqueue")
    command, args = (script, ["mcp"]) if script else (sys.executable, ["-m", "agentqueue", "mcp"])
    entry: dict[str, Any] = {"command": str(Path(command).resolve()), "args": args,
                             "env": {"AGENTQUEUE_HOME": str(home)}}
    if client in ("claude-code", "vscode"):
        entry = {"type": "stdio", **entry}
    return entry


def install(client: str, home: Path, dry_run: bool = False, path: Path | None = None) -> tuple[Path, str]:
    """Merge the entry into the client's config; returns (path, what happened)."""
    path = path or config_path(client)
    config: dict[str, Any] = {}
    if path.exists():
        text = path.read_text(encoding="utf-8")
        try:
            config = json.loads(text) if text.strip() else {}
        except ValueError as error:
            raise SystemExit(f"{path} is not valid JSON ({error}); fix or move it, then run install again.") from None
    key = "servers" if client == "vscode" else "mcpServers"
    servers = config.setdefault(key, {})
    entry = server_entry(client, home)
    if servers.get("agentqueue") == entry:
        return path, f"{path} already has this AgentQueue entry; nothing to do."
    servers["agentqueue"] = entry
    rendered = json.dumps(config, indent=2) + "\n"
    if dry_run:
        return path, f"Would write {path}:\n{rendered}"
    path.parent.mkdir(parents=True, exist_ok=True)
    note = ""
    if path.exists():
        backup = path.with_name(f"{path.name}.bak-{time.strftime('%Y%m%d-%H%M%S')}")
        shutil.copy2(path, backup)
        note = f" (previous file saved as {backup.name})"
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(rendered, encoding="utf-8")
    os.replace(tmp, path)
    return path, f"Added AgentQueue to {path}{note}. Restart {client} to load it."
