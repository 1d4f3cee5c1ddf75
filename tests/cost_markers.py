"""Whether a test's cost markers (`daemon`, `real_cli`, `browser`) tell the truth, checked while it runs.

Opt-in: AGENTQUEUE_CHECK_MARKERS=PATH makes every test that starts a daemon, a real agent CLI or Chromium without
the matching marker fail at teardown, and appends one JSON line per test that started any of them to PATH (the
markers a test carries but was not seen to need are listed there too: a daemon's own children are not seen).
Off by default, as an audit hook sees every process the suite starts.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

REPORT = os.environ.get("AGENTQUEUE_CHECK_MARKERS", "")
AGENT_CLIS = {"claude", "codex", "gemini"}
_spawned: list[list[str]] | None = None


def _on_audit(event: str, args: tuple[Any, ...]) -> None:
    if _spawned is None:
        return
    if event == "subprocess.Popen":
        argv = args[1]
    elif event == "os.posix_spawn":
        argv = args[1]
    else:
        return
    _spawned.append([os.fsdecode(a) for a in argv] if isinstance(argv, (list, tuple)) else [os.fsdecode(argv)])


if REPORT:
    sys.addaudithook(_on_audit)


def _a_daemon_held_a_home_under(root: Path) -> bool:
    """A daemon (in a subprocess or in-process) leaves the lock file it held in the home it served."""
    for _folder, subfolders, files in os.walk(root):
        if "daemon.lock" in files:
            return True
        subfolders[:] = [d for d in subfolders if d not in (".git", "node_modules", "workspaces")]
    return False


def _executable(command: str) -> bool:
    found = shutil.which(command) if "/" not in command else command
    return bool(found) and os.path.isfile(found) and os.access(found, os.X_OK)


def _needs(spawned: list[list[str]], tmp_path: Path) -> set[str]:
    needs = set()
    for argv in spawned:
        # Anywhere in argv, as an agent run is wrapped (bwrap ... /path/to/claude ...); an executable file, so that
        # a folder such as conf/claude in a command's arguments is not taken for the CLI.
        if any(Path(a).name in AGENT_CLIS and ("/" in a or a is argv[0]) and _executable(a) for a in argv):
            needs.add("real_cli")
        if any("playwright" in a or "chrom" in Path(a).name for a in argv[:2]):
            needs.add("browser")
        if "serve" in argv and any("agentqueue" in a for a in argv):
            needs.add("daemon")
    if _a_daemon_held_a_home_under(tmp_path):
        needs.add("daemon")
    return needs


def check(node: Any, tmp_path: Path) -> Any:
    """A generator for an autouse fixture: watch the test's processes, then compare with its markers."""
    global _spawned
    if not REPORT:
        yield
        return
    _spawned = []
    try:
        yield
    finally:
        spawned, _spawned = _spawned, None
    needs = _needs(spawned, tmp_path)
    marked = {m for m in ("daemon", "real_cli", "browser") if node.get_closest_marker(m) is not None}
    if needs or marked:
        with open(REPORT, "a") as report:
            report.write(json.dumps({"test": node.nodeid, "needs": sorted(needs), "marked": sorted(marked)}) + "\n")
    missing = needs - marked
    assert not missing, f"{node.nodeid} started {sorted(missing)} but is not marked so (see pyproject's markers)"
