"""`agentqueue restart|stop-task|skip|delete TASK` and `request-changes TASK -m MESSAGE`: the task tools a model
calls (restart_task, stop_task, skip_task, delete_task, request_changes), through the daemon, so the policy gate,
validation and events are the ones a model's call gets. Each prints a one-line outcome; `delete` asks first."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ...visible import visible
from ..advice import terminal_words
from ..output import CliError, call_daemon_tool, print_json, say
from ..parser import add_command, json_flag

# command -> (tool, one-line summary, description)
ACTIONS = {
    "restart": ("restart_task", "run a task again (retries reset; not while it runs)",
                "Put a task back in the queue with its retries reset: a FAILED, BLOCKED, PAUSED or COMPLETED task "
                "runs again (READY, or DEFINED while its dependencies are open). Not while an agent runs it "
                "(stop-task it first)."),
    "stop-task": ("stop_task", "stop a task: kill its agent if one runs, mark it BLOCKED",
                  "Stop a task: its agent is killed if one runs, and the task is BLOCKED until restarted "
                  "(`agentqueue restart TASK`) or skipped."),
    "skip": ("skip_task", "mark a BLOCKED or FAILED task COMPLETED so its dependents run",
             "Mark a BLOCKED or FAILED task COMPLETED without running it, so the tasks that wait on it can start."),
    "delete": ("delete_task", "delete a task and its results (asks first)",
               "Delete a task and its results; the tasks waiting on it lose that dependency. On a terminal you are "
               "asked first; without one, --yes is needed. Not while an agent runs it (stop-task it first)."),
    "request-changes": ("request_changes", "send a task back to its agent with a comment",
                        "Send a task (AWAITING_APPROVAL, COMPLETED, FAILED or BLOCKED) back with your comment: it "
                        "runs again on its branch, the comment in its prompt."),
}


def register(sub: argparse._SubParsersAction) -> None:
    for name, (_tool, summary, description) in ACTIONS.items():
        command = add_command(sub, name, summary, run, description)
        command.add_argument("task", help="task id, e.g. swift-falcon")
        if name == "delete":
            command.add_argument("--yes", action="store_true", help="delete without asking")
        if name == "request-changes":
            command.add_argument("-m", "--message", required=True, help="what the agent should change")
            command.add_argument("--file", help="the file the comment is about (a path from the task's diff)")
            command.add_argument("--line", type=int, help="the line of --file the comment is about")
        json_flag(command)


def run(args: argparse.Namespace, home: Path) -> int:
    tool = ACTIONS[args.command][0]
    arguments: dict[str, Any] = {"task_id": args.task}
    if args.command == "request-changes":
        arguments["comment"] = args.message
        arguments |= {k: v for k, v in (("file", args.file), ("line", args.line)) if v is not None}
    if args.command == "delete" and not args.yes and not _confirmed(home, args.task):
        print("Not deleted.")
        return 1
    result = call_daemon_tool(home, tool, arguments)
    if args.json:
        print_json(result)
    else:
        say(outcome(args.command, args.task, result))
    return 0


def _confirmed(home: Path, task_id: str) -> bool:
    """Asks on a terminal; without one, refuses (as `stop` does) and says --yes."""
    if not sys.stdin.isatty():
        raise CliError(f"Not deleted: there is no terminal to ask. Pass --yes to delete {task_id} and its results.")
    what = _describe(home, task_id)
    answer = input(visible(f"Delete {what} and its results? [y/N] ")).strip().lower()
    return answer in ("y", "yes")


def _describe(home: Path, task_id: str) -> str:
    """`task swift-falcon 'Title' (FAILED)` for the question; just the id when the store cannot say (the tool's
    refusal then names what is wrong)."""
    from ...services.errors import ServiceError
    from .. import reads as cli_reads

    try:
        store = cli_reads.open_store_for_reading(home)
    except CliError:
        return f"task {task_id}"
    try:
        row = cli_reads.task(store, task_id)
    except ServiceError:
        return f"task {task_id}"
    finally:
        store.close()
    return f"task {row['id']} '{row['title']}' ({row['status']})"


def _unblocked(result: dict[str, Any]) -> str:
    refs = result.get("unblocked") or []
    if not refs:
        return ""
    names = ", ".join(r["id"] for r in refs[:10]) + (f" and {len(refs) - 10} more" if len(refs) > 10 else "")
    return f" Now free to run: {names}."


def outcome(command: str, task_id: str, result: dict[str, Any]) -> str:
    """The one line a command prints about what it did, with the next command when there is one."""
    if command == "restart":
        step = (f" `agentqueue logs {task_id} -f` follows it." if result["status"] == "READY"
                else f" It starts when its dependencies complete (`agentqueue show {task_id}`).")
        return f"Restarted {task_id}: {result['previous_status']} -> {result['status']}, retries reset.{step}"
    if command == "stop-task":
        killed = " (its agent was killed)" if result.get("killed") else ""
        return (f"Stopped {task_id}: {result['previous_status']} -> {result['status']}{killed}. "
                f"`agentqueue restart {task_id}` puts it back in the queue; `agentqueue skip {task_id}` marks it done.")
    if command == "skip":
        return f"Skipped {task_id}: it is COMPLETED without running.{_unblocked(result)}"
    if command == "delete":
        return f"Deleted {task_id} and its results.{_unblocked(result)}"
    return f"Sent {task_id} back ({result['previous_status']} -> {result['status']}). " \
           + terminal_words(result.get("message"), task_id)
