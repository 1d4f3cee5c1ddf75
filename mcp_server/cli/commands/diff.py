"""`agentqueue diff TASK`: the changes a task made (get_task_diff: its branch against the default branch)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ...visible import visible
from ..output import console, open_services, print_json
from ..parser import add_command, json_flag


def register(sub: argparse._SubParsersAction) -> None:
    command = add_command(sub, "diff", "the changes a task made (its branch against the default branch)", run)
    command.add_argument("task", help="task id")
    json_flag(command)


def run(args: argparse.Namespace, home: Path) -> int:
    return diff(home, args.task, args.json)


def diff(home: Path, task_id: str, as_json: bool) -> int:
    services = open_services(home)
    try:
        result = services.vcs.task_diff(services.tasks.get(task_id))
    finally:
        services.close()
    if as_json:
        print_json(result)
        return 0
    files = result["files_changed"]
    print(visible(f"# {task_id}: branch {result['branch']} against {result['base'][:12]}, {len(files)} file(s) "
                  "changed"), file=sys.stderr)
    if not result["diff"].strip():
        print("(no changes)", file=sys.stderr)
        return 0
    # Shown, not applied: a file's escape bytes print as \x1b even when piped (`diff --json` has them exact).
    text = visible(result["diff"], multiline=True)
    if sys.stdout.isatty():
        from rich.syntax import Syntax

        console().print(Syntax(text, "diff", theme="ansi_dark", background_color="default", word_wrap=True))
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0
