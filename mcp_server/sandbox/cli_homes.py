"""Each sandboxed run of an agent CLI gets a state folder of its own, thrown away when the run ends (issue 33, C4).

A CLI's settings steer every later session that reads them: a hook in `~/.claude/settings.json`, `notify` or
`mcp_servers` in `~/.codex/config.toml`, `mcpServers` in `~/.gemini/settings.json`, an instruction in CLAUDE.md.
So no run may write the person's own folders. The run's CLI is pointed (CLAUDE_CONFIG_DIR, CODEX_HOME,
GEMINI_CLI_HOME) at a fresh folder seeded with copies of the person's login and settings, the person's shared
folders (skills, commands) shown read-only through links, and Codex's exec-policy rules copied and bound read-only
(a rule the run adds there would let its own commands skip the policy). What the run writes there is gone after it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CliHome:
    """Where one CLI keeps its state, and what of the person's a run's copy of it starts with."""

    variable: str  # the CLI's own switch for its state folder
    default: str  # the person's folder, relative to HOME, when the variable is not set
    below: str  # where the CLI's files lie inside the variable's folder ("" : in it)
    copies: tuple[str, ...]  # small files copied in: the login and the person's settings
    links: tuple[str, ...]  # the person's folders shown through a link (read-only: the sandbox's / is)
    frozen: tuple[str, ...] = ()  # folders copied in and bound read-only for the run


CLI_HOMES = {
    "claude-code": CliHome("CLAUDE_CONFIG_DIR", ".claude", "", (".credentials.json", "settings.json", "CLAUDE.md"),
                           ("skills", "agents", "commands")),
    "codex": CliHome("CODEX_HOME", ".codex", "", ("auth.json", "config.toml", "AGENTS.md"), ("skills", "prompts"),
                     ("rules",)),
    "gemini": CliHome("GEMINI_CLI_HOME", "", ".gemini",
                      ("settings.json", "oauth_creds.json", "google_accounts.json", "installation_id", "user_id",
                       "GEMINI.md", ".env", "trustedFolders.json"), ("commands", "extensions", "skills")),
}
# The person's files the throwaway folders replace: no run writes them any more (claude-code's global config lies
# beside ~/.claude unless CLAUDE_CONFIG_DIR is set).
PERSON_STATE = {"claude-code": (".claude", ".claude.json"), "codex": (".codex",), "gemini": (".gemini",)}


@dataclass(frozen=True)
class RunHome:
    """One run's own state folder: removed when the run ends."""

    root: Path
    env: dict[str, str]
    frozen: tuple[Path, ...]


def person_folder(kind: str, env: Mapping[str, str]) -> Path | None:
    """The person's own state folder of this CLI, as the daemon's environment names it."""
    spec = CLI_HOMES.get(kind)
    if spec is None:
        return None
    chosen = env.get(spec.variable, "").strip()
    if chosen:
        return Path(chosen) / spec.below
    return Path(env.get("HOME") or Path.home()) / (spec.default or spec.below)


def make_run_home(kind: str | None, env: Mapping[str, str], parent: Path) -> RunHome | None:
    """A fresh state folder for a run of `kind`'s CLI, seeded from the person's; None for a kind with no CLI."""
    spec = CLI_HOMES.get(kind or "")
    source = person_folder(kind or "", env)
    if spec is None or source is None:
        return None
    root = Path(tempfile.mkdtemp(prefix=f"state-{kind}-", dir=parent))
    folder = root / spec.below if spec.below else root
    folder.mkdir(mode=0o700, exist_ok=True)
    for name in spec.copies:
        if (source / name).is_file():
            with contextlib.suppress(OSError):  # an unreadable file is one the run goes without
                shutil.copy2(source / name, folder / name)
    for name in spec.links:
        if (source / name).is_dir():
            (folder / name).symlink_to(source / name)
    frozen = []
    for name in spec.frozen:
        target = folder / name
        if (source / name).is_dir():
            with contextlib.suppress(OSError, shutil.Error):
                shutil.copytree(source / name, target, symlinks=True)
        target.mkdir(mode=0o700, exist_ok=True)  # there even when empty: nothing can be planted in it
        frozen.append(target)
    os.chmod(root, 0o700)
    return RunHome(root, {spec.variable: str(root)}, tuple(frozen))
