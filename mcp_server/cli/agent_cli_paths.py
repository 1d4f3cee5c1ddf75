"""Record where the terminal finds the agent CLIs in `$AGENTQUEUE_HOME/config.toml` `[cli]`.

A daemon started by a GUI client inherits its minimal PATH and would not find `claude` in
~/.local/bin or a Node version manager's dir; `agentqueue install` writes the paths the user's
terminal sees, once, and never overwrites a key the user set. The rest of the file is kept as is.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tomllib
from pathlib import Path

# The `[cli]` keys of config.toml (the names `agentqueue.settings` reads) and the program each names.
CLI_KEYS = {"claude": "claude", "codex": "codex", "gemini": "gemini", "gh": "gh",
            "claude-agent-acp": "claude-agent-acp", "codex-acp": "codex-acp"}  # the ACP presets' adapters


def config_file(home: Path) -> Path:
    return home / "config.toml"


def discover() -> dict[str, str]:
    """Each CLI found on this process's PATH, by absolute (unresolved: a symlink survives upgrades) path."""
    found = {}
    for key, program in CLI_KEYS.items():
        where = shutil.which(program)
        if where:
            found[key] = os.path.abspath(where)
    return found


def read_cli_table(home: Path) -> dict[str, object]:
    """The `[cli]` table as written (raises ValueError naming the file when it is not valid TOML)."""
    path = config_file(home)
    if not path.exists():
        return {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as error:
        raise ValueError(f"{path} is not valid TOML ({error})") from None
    table = data.get("cli", {})
    return table if isinstance(table, dict) else {}


def _rendered(keys: dict[str, str]) -> str:
    # A JSON string is a valid TOML basic string (same escapes for quotes, backslashes and controls).
    return "".join(f"{key} = {json.dumps(value)}\n" for key, value in keys.items())


def record(home: Path, found: dict[str, str] | None = None, dry_run: bool = False) -> str | None:
    """Add the CLI paths missing from `[cli]`; returns what was (or would be) written, or None if nothing."""
    found = discover() if found is None else found
    path = config_file(home)
    try:
        existing = read_cli_table(home)
    except ValueError as error:
        return f"Left {path} alone: {error}. Fix it, then run install again to record the CLI paths."
    missing = {key: value for key, value in found.items() if key not in existing}
    if not missing:
        return None
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    lines = _rendered(missing)
    header = re.search(r"^[ \t]*\[cli\][ \t]*(#.*)?$", text, re.M)
    if header:
        end = header.end()
        newline = text.find("\n", end)
        cut = len(text) if newline < 0 else newline + 1
        new_text = text[:cut] + ("" if text[:cut].endswith("\n") else "\n") + lines + text[cut:]
    elif "cli" in _top_level_keys(text):
        listing = ", ".join(f"{k} = {json.dumps(v)}" for k, v in missing.items())
        return f"{path} sets `cli` without a [cli] table; add these yourself: {listing}"
    else:
        separator = "" if not text or text.endswith("\n\n") else ("\n" if text.endswith("\n") else "\n\n")
        new_text = text + separator + "[cli]\n" + lines
    summary = ", ".join(f"{k} = {v}" for k, v in missing.items())
    if dry_run:
        return f"Would record in {path} [cli]: {summary}"
    home.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(new_text, encoding="utf-8")
    # It may hold [agent_env] keys: a new file is 0600, and a rewrite keeps the owner's bits only.
    os.chmod(tmp, path.stat().st_mode & 0o700 if path.exists() else 0o600)
    os.replace(tmp, path)
    return (f"Recorded in {path} [cli]: {summary}\n"
            "  (a daemon started by a GUI client, with a minimal PATH, finds the CLIs there)")


def _top_level_keys(text: str) -> set[str]:
    try:
        return set(tomllib.loads(text))
    except tomllib.TOMLDecodeError:
        return set()
