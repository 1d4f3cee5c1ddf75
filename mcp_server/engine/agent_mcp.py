"""The MCP config that attaches AgentQueue's own server to an agent CLI the engine runs."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from .. import paths

# Agent CLIs whose adapter passes an MCP config on (the others reach the toolset through `agentqueue task …`).
# ACP agents (gemini runs through its ACP mode) get it in session/new's mcpServers.
TAKES_MCP_CONFIG = ("claude-code", "codex", "gemini", "acp")


def agentqueue_server(home: Path, toolsets: tuple[str, ...] = ()) -> dict[str, Any]:
    """`agentqueue mcp` for an agent: the daemon knows from the connecting process which run it is (the audit
    actor, and the task whose follow-ups it queues), so the plugin claims nothing."""
    command = paths.self_command("mcp", *(("--toolsets", ",".join(toolsets)) if toolsets else ()))
    # NO_START: an engine without a daemon (the standalone server) has no socket, and must not get a rival.
    env = {"AGENTQUEUE_HOME": str(home), "AGENTQUEUE_NO_START": "1"}
    return {"mcpServers": {"agentqueue": {"type": "stdio", "command": command[0], "args": command[1:], "env": env}}}


# Sourced by non-interactive bash through BASH_ENV (see the file): keeps `agentqueue` on PATH in login shells.
PATH_SCRIPT = Path(__file__).with_name("agent_path.sh")


def cli_environment(home: Path, task_id: str, env: dict[str, str]) -> dict[str, str]:
    """What every run gets for `agentqueue task …` (the skill's CLI): the home whose daemon to call, never a rival
    daemon, the task's id (a convenience: the daemon knows the run from the calling process, not from this), and
    `agentqueue` on PATH, after the run's own programs (this install's interpreter must not shadow the project's),
    kept there in a login shell through BASH_ENV unless the run's environment sets its own."""
    script = Path(sys.executable).parent / "agentqueue"
    parts = [p for p in env.get("PATH", "").split(os.pathsep) if p]
    out = {"AGENTQUEUE_HOME": str(home), "AGENTQUEUE_NO_START": "1", "AGENTQUEUE_TASK_ID": task_id}
    if script.is_file():
        if str(script.parent) not in parts:
            parts.append(str(script.parent))
        out["AGENTQUEUE_BIN_DIR"] = str(script.parent)
        if not env.get("BASH_ENV"):
            out["BASH_ENV"] = str(PATH_SCRIPT)
    return out | {"PATH": os.pathsep.join(parts)}
