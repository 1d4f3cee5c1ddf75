"""The CLI's actions: approve, pause, resume go through the daemon's tools; stop asks before interrupting agents."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from . import paths
from .cli_output import CliError, duration, print_json
from .daemon_client import DaemonError, ToolError, call_tool, running_daemon, terminal_asker
from .visible import visible


def _call(home: Path, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    try:
        return call_tool(home, tool, arguments, ask=terminal_asker())
    except (ToolError, DaemonError) as error:
        raise CliError(str(error)) from None


def approve(home: Path, task_id: str, as_json: bool) -> int:
    task = _call(home, "approve_task", {"task_id": task_id})
    if as_json:
        print_json(task)
        return 0
    pr = f" (PR {task['pr_url']})" if task.get("pr_url") else ""
    print(visible(f"Approved {task['id']}: {task['status']}{pr}."))
    return 0


def pause_or_resume(home: Path, action: str, project: str | None, as_json: bool) -> int:
    """With a project: pause_project/resume_project; without: the whole orchestrator."""
    if project:
        result = _call(home, f"{action}_project", {"project_id": project})
        message = (f"Project {result['id']} is {result['status']}: "
                   + ("none of its tasks start until `agentqueue resume " + result["id"] + "`."
                      if action == "pause" else "its READY tasks start as agents free up."))
    else:
        result = _call(home, "orchestrator_control", {"action": action})
        running = result.get("running_tasks", 0)
        if action == "pause":
            message = (f"Orchestrator {result['state']}: no new task starts"
                       + (f"; {running} running task(s) finish" if running else "")
                       + ". `agentqueue resume` starts them again.")
        else:
            message = f"Orchestrator {result['state']}: READY tasks start as agents free up."
    if as_json:
        print_json(result)
    else:
        print(visible(message))
    return 0


def running_agents(home: Path) -> list[dict[str, Any]]:
    """The claimed tasks (what stopping the daemon interrupts: a run waiting for input too), read from the store."""
    if not paths.db_path(home).exists():
        return []
    from .cli_reads import open_store_for_reading
    from .services.task_states import CLAIMED
    from .status_view import running_tasks

    store = open_store_for_reading(home)
    try:
        return running_tasks(store, CLAIMED)
    finally:
        store.close()


def stop(home: Path, force: bool) -> int:
    """Stop the daemon; with agents running, list them and ask (a TTY) or require --force (no TTY)."""
    from .daemon import stop as stop_daemon

    if running_daemon(home) is None:
        print(f"No AgentQueue daemon is running for {home}.")
        return 1
    running = running_agents(home)
    if running:
        print(f"Stopping the daemon interrupts {len(running)} running agent(s):")
        for row in running:
            print(f"  {visible(row['agent_id'] or '-'):<14} {visible(row['task_id']):<16} {row['status']:<11} "
                  f"{duration(row['elapsed_s']):>8}  {visible(row['title'][:40])}")
        print("Their tasks are recovered when the daemon starts again (work kept as a WIP commit, the task "
              "back to READY).")
        if not force:
            if not sys.stdin.isatty():
                raise CliError("Not stopped: agents are running and there is no terminal to ask. "
                               "Pass --force to stop anyway.")
            answer = input("Stop the daemon and interrupt them? [y/N] ").strip().lower()
            if answer not in ("y", "yes"):
                print("Not stopped.")
                return 1
    stopped, message = stop_daemon(home)
    print(visible(message, multiline=True))
    return 0 if stopped else 1
