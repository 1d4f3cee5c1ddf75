"""`agentqueue add TITLE`: create_task through the daemon (the tool a model calls: its checks, its events)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..advice import terminal_words
from ..output import CliError, call_daemon_tool, print_json, say
from ..parser import add_command, json_flag


def register(sub: argparse._SubParsersAction) -> None:
    command = add_command(
        sub, "add", "queue a task for an agent", run,
        "Queue a task for an agent. The project is the only one there is, or the one --project names "
        "(`agentqueue projects` lists them).")
    command.add_argument("title", help="what the task is, in a few words")
    command.add_argument("-d", "--description", help="the agent's instructions (default: the title)")
    command.add_argument("--project", help="project id (needed when there are several)")
    command.add_argument("--priority", type=int, help="lower runs first (default 100)")
    command.add_argument("--repo", help="repo id of the project to run in (default: the project's repo)")
    command.add_argument("--after", nargs="+", metavar="TASK", help="tasks that must complete before this one starts")
    command.add_argument("--approval", action="store_true",
                         help="wait for `agentqueue approve` before its work lands")
    json_flag(command)


def run(args: argparse.Namespace, home: Path) -> int:
    project = args.project or _only_project(home)
    arguments: dict[str, Any] = {"title": args.title, "description": args.description or args.title,
                                 "project_id": project}
    if args.priority is not None:
        arguments["priority"] = args.priority
    if args.repo:
        arguments["repo_id"] = args.repo
    if args.after:
        arguments["depends_on"] = args.after
    if args.approval:
        arguments["requires_approval"] = True
    task = call_daemon_tool(home, "create_task", arguments)
    if args.json:
        print_json(task)
        return 0
    tid = task["id"]
    waits = (f"DEFINED, waiting on {', '.join(task['depends_on'])}" if task["status"] == "DEFINED"
             else task["status"])
    where = f" in repo {task['repo_id']}" if task.get("repo_id") else ""
    line = (f"Added {tid} to {task['project_id']}{where}: {waits}, priority {task['priority']}. "
            f"`agentqueue logs {tid} -f` follows it.")
    if task.get("warning"):
        line += " " + terminal_words(task["warning"], tid)
    say(line)
    return 0


def _only_project(home: Path) -> str:
    """The project when there is just one; else a refusal that says how to choose."""
    listed = call_daemon_tool(home, "list_projects", {"limit": 6})
    ids = [p["id"] for p in listed["projects"]]
    if len(ids) == 1:
        return ids[0]
    if not ids:
        raise CliError("There is no project yet. Ask your client to create one (create_project), then add the task.")
    more = f" and {listed['total'] - len(ids)} more" if listed["total"] > len(ids) else ""
    raise CliError(f"There are {listed['total']} projects ({', '.join(ids)}{more}): choose one with --project ID "
                   "(`agentqueue projects` lists them).")
