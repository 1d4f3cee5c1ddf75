"""The MCP config that attaches AgentQueue's own server to an agent CLI the engine runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import paths

# Agent CLIs whose adapter passes an MCP config on (the others run without AgentQueue's tools).
TAKES_MCP_CONFIG = ("claude-code",)


def agentqueue_server(home: Path, actor: str, task_id: str | None = None,
                      toolsets: tuple[str, ...] = ()) -> dict[str, Any]:
    """`agentqueue mcp` for an agent: the plugin names the actor (and task) to the daemon in its preamble,
    so the audit log says who called, and a task's agent queues follow-ups of its own task."""
    command = paths.self_command("mcp", *(("--toolsets", ",".join(toolsets)) if toolsets else ()))
    # NO_START: an engine without a daemon (the standalone server) has no socket, and must not get a rival.
    env = {"AGENTQUEUE_HOME": str(home), "AGENTQUEUE_ACTOR": actor, "AGENTQUEUE_NO_START": "1"}
    if task_id:
        env["AGENTQUEUE_TASK_ID"] = task_id
    return {"mcpServers": {"agentqueue": {"type": "stdio", "command": command[0], "args": command[1:], "env": env}}}
