"""`agentqueue pause [PROJECT]` and `resume [PROJECT]`: one project (pause_project/resume_project) or, with no
project, the whole orchestrator (orchestrator_control), through the daemon. Running agents finish. `resume` with no
project also unparks every agent kind parked on a failed login or a usage limit (services/parking.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ...visible import visible
from ..output import call_daemon_tool, print_json
from ..parser import add_command, json_flag


def register(sub: argparse._SubParsersAction) -> None:
    for name, verb in (("pause", "stop starting new tasks"), ("resume", "start tasks again")):
        command = add_command(sub, name, f"{verb}: one project, or with no project the whole orchestrator", run,
                              f"{verb[0].upper() + verb[1:]} for PROJECT, or with no PROJECT for the whole "
                              "orchestrator. Running agents finish.")
        command.add_argument("project", nargs="?", help="project id (omit for all projects)")
        json_flag(command)


def run(args: argparse.Namespace, home: Path) -> int:
    action, project = args.command, args.project
    if project:
        result = call_daemon_tool(home, f"{action}_project", {"project_id": project})
        message = (f"Project {result['id']} is {result['status']}: "
                   + ("none of its tasks start until `agentqueue resume " + result["id"] + "`."
                      if action == "pause" else "its READY tasks start as agents free up."))
    else:
        result = call_daemon_tool(home, "orchestrator_control", {"action": action})
        running = result.get("running_tasks", 0)
        if action == "pause":
            message = (f"Orchestrator {result['state']}: no new task starts"
                       + (f"; {running} running task(s) finish" if running else "")
                       + ". `agentqueue resume` starts them again.")
        else:
            message = f"Orchestrator {result['state']}: READY tasks start as agents free up."
            unparked = result.get("unparked") or []
            message += (f" Unparked agent kind(s) {', '.join(unparked)}: their tasks start again." if unparked
                        else " No agent kind was parked.")
    if args.json:
        print_json(result)
    else:
        print(visible(message))
    return 0
