"""`agentqueue task create|list|show|status|note|memory`: the `agent` toolset as terminal commands that print JSON,
for agents without MCP (the skill, cli/agent_skill.md, teaches them).

Each is one tool call through the daemon's socket, so the caller is who the kernel says it is: a process of one
of the engine's runs (an agent's Bash, however deep) is that run's agent, held to the `agent` toolset, the
person-only rules, the policy and [engine] max_task_depth exactly as its MCP connection is; any other process is
a person's client. Nothing the caller says (AGENTQUEUE_TASK_ID included) names it.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from ...visible import visible
from ..output import CliError, call_daemon_tool, print_json
from ..parser import add_command

# The variable the engine sets in every run: the task's id, for the agent's convenience (`task show` with no id);
# never trusted as identity.
TASK_ENV = "AGENTQUEUE_TASK_ID"

# Each action and the `agent` toolset's tools it calls (tests/test_agent_skill.py checks none is left out).
TOOLS: dict[str, tuple[str, ...]] = {
    "create": ("create_task",), "list": ("list_tasks",), "show": ("get_task",), "status": ("get_status",),
    "note": ("list_notes", "read_note", "write_note", "append_note"), "memory": ("write_memory",)}

DESCRIPTION = """\
The tools a task's agent has (the `agent` toolset), as commands that print JSON. Run
inside a task's agent, the daemon knows the run from the calling process: a follow-up
is queued as a child of that task (one level deeper, up to [engine] max_task_depth),
and the same policy applies as to its MCP tools. Run anywhere else, they act as a
person's client does."""


def register(sub: argparse._SubParsersAction) -> None:
    command = add_command(sub, "task", "the agent toolset as JSON commands: create, list, show, note, memory",
                          _usage, DESCRIPTION)
    actions = command.add_subparsers(dest="action", metavar="ACTION", title="actions")

    create = _action(actions, "create", "queue a task (from an agent: a follow-up of its own task)", _create)
    create.add_argument("title", help="a short title")
    create.add_argument("-d", "--description", required=True,
                        help="self-contained instructions for the agent that will run it ('-' reads stdin)")
    create.add_argument("--project", help="the project (default: an agent's own task's project)")
    create.add_argument("--priority", type=int, help="lower runs first (default 100)")
    create.add_argument("--after", metavar="TASK,…", help="tasks it waits for (comma-separated ids)")
    create.add_argument("--repo", help="the repo id (default: the project's default repo)")
    create.add_argument("--agent-type", help="claude-code, codex, gemini or command")
    create.add_argument("--requires-approval", action="store_true", help="wait for a person's approval when done")

    listing = _action(actions, "list", "list tasks by priority (COMPLETED hidden unless --all)", _list)
    listing.add_argument("--project", help="only this project's tasks")
    listing.add_argument("--status", help="only these statuses (e.g. READY,DEFINED)")
    listing.add_argument("--all", action="store_true", help="include COMPLETED tasks")
    listing.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")

    show = _action(actions, "show", "one task: status, dependencies, dependents, branch", _show)
    show.add_argument("task", nargs="?", help=f"the task id (default: ${TASK_ENV}, the run's own task)")

    _action(actions, "status", "the queue at a glance: tasks, agents, warnings", _status)

    note = _action(actions, "note", "project notes: list, read, write, append", _note)
    note.add_argument("verb", choices=("list", "read", "write", "append"))
    note.add_argument("title", nargs="?", help="the note's title (read, write, append)")
    note.add_argument("-m", "--content", help="the text to write or append ('-' reads stdin)")
    note.add_argument("--project", help="the project (default: the active or only one)")
    note.add_argument("--offset", type=int, default=0, help="read from this character on")

    memory = _action(actions, "memory", "add to the project's MEMORY.md, which every agent's prompt includes",
                     _memory)
    memory.add_argument("content", help="what every later agent should know ('-' reads stdin)")
    memory.add_argument("--replace", action="store_true", help="replace MEMORY.md instead of appending")
    memory.add_argument("--project", help="the project (default: an agent's own task's project)")


def _action(actions: argparse._SubParsersAction, name: str, summary: str, run: Any) -> argparse.ArgumentParser:
    parser = actions.add_parser(name, help=summary, description=summary[0].upper() + summary[1:] + ".")
    parser.set_defaults(run=run)
    return parser


def _usage(args: argparse.Namespace, home: Path) -> int:
    raise CliError("name an action: create, list, show, status, note or memory (`agentqueue task --help`).")


def _call(home: Path, tool: str, arguments: dict[str, Any]) -> int:
    """The tool's result as JSON on stdout; a refusal is the tool's own sentence on stderr, exit status 1 (kept
    tool-worded, unlike other commands' refusals: an agent reads it, and its commands are these)."""
    try:
        result = call_daemon_tool(home, tool, {k: v for k, v in arguments.items() if v is not None})
    except CliError as error:
        print(f"agentqueue task: {visible(str(error), multiline=True)}", file=sys.stderr)
        return 1
    print_json(result)
    return 0


def _text(value: str) -> str:
    return sys.stdin.read() if value == "-" else value


def _create(args: argparse.Namespace, home: Path) -> int:
    after = [t.strip() for t in (args.after or "").split(",") if t.strip()]
    return _call(home, "create_task", {
        "title": args.title, "description": _text(args.description), "project_id": args.project,
        "priority": args.priority, "repo_id": args.repo, "agent_type": args.agent_type,
        "requires_approval": args.requires_approval or None, "depends_on": after or None})


def _list(args: argparse.Namespace, home: Path) -> int:
    return _call(home, "list_tasks", {"project_id": args.project, "status": args.status,
                                      "include_completed": args.all or None, "limit": args.limit})


def _show(args: argparse.Namespace, home: Path) -> int:
    task = args.task or os.environ.get(TASK_ENV)
    if not task:
        raise CliError(f"name the task: `agentqueue task show TASK` (${TASK_ENV} is set only inside a run).")
    return _call(home, "get_task", {"task_id": task})


def _status(args: argparse.Namespace, home: Path) -> int:
    return _call(home, "get_status", {})


def _note(args: argparse.Namespace, home: Path) -> int:
    if args.verb == "list":
        return _call(home, "list_notes", {"project_id": args.project})
    if not args.title:
        raise CliError(f"name the note: `agentqueue task note {args.verb} TITLE`.")
    if args.verb == "read":
        return _call(home, "read_note", {"title": args.title, "project_id": args.project, "offset": args.offset})
    if args.content is None:
        raise CliError(f"give the text: `agentqueue task note {args.verb} {args.title!r} -m TEXT` ('-m -' reads "
                       "stdin).")
    tool = "write_note" if args.verb == "write" else "append_note"
    return _call(home, tool, {"title": args.title, "content": _text(args.content), "project_id": args.project})


def _memory(args: argparse.Namespace, home: Path) -> int:
    # write_memory: the agent toolset's MEMORY.md writer (services/memory.py); it scopes an agent to its task's
    # project itself.
    return _call(home, "write_memory", {"content": _text(args.content), "mode": "replace" if args.replace else None,
                                        "project_id": args.project})
