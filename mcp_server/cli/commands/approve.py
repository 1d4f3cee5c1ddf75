"""`agentqueue approve TASK`: approve_task through the daemon (its work lands, dependents may start)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ...visible import visible
from ..output import call_daemon_tool, print_json
from ..parser import add_command, json_flag


def register(sub: argparse._SubParsersAction) -> None:
    command = add_command(sub, "approve", "approve a task AWAITING_APPROVAL (its work lands, dependents may start)",
                          run)
    command.add_argument("task", help="task id")
    json_flag(command)


def run(args: argparse.Namespace, home: Path) -> int:
    task = call_daemon_tool(home, "approve_task", {"task_id": args.task})
    if args.json:
        print_json(task)
        return 0
    pr = f" (PR {task['pr_url']})" if task.get("pr_url") else ""
    print(visible(f"Approved {task['id']}: {task['status']}{pr}."))
    return 0
