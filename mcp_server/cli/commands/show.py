"""`agentqueue show TASK`: one task: status, reason and next step, attempts, branch/PR, files, last result."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ... import paths
from ...services.task_states import NEEDS_PERSON
from .. import reads as cli_reads
from ..advice import next_step as step_for, terminal_words
from ..output import console, duration, print_json, shown, status_text
from ..parser import add_command, json_flag


def register(sub: argparse._SubParsersAction) -> None:
    command = add_command(sub, "show",
                          "one task: status, reason and next step, attempts, branch/PR, files, last result", run)
    command.add_argument("task", help="task id, e.g. swift-falcon")
    json_flag(command)


def run(args: argparse.Namespace, home: Path) -> int:
    return show(home, args.task, args.json)


def show(home: Path, task_id: str, as_json: bool) -> int:
    store = cli_reads.open_store_for_reading(home)
    try:
        task = cli_reads.task(store, task_id)
        attempts, result = cli_reads.last_result(store, task_id)
        reason, next_step = task["reason"], task["next_step"]
        error = None
        if task["status"] in NEEDS_PERSON and result is not None and result["status"] != "completed":
            error = cli_reads.agent_error(store, task_id)
        waiting_on = cli_reads.statuses(store, task["depends_on"]) if task["status"] == "DEFINED" else []
        paused = cli_reads.what_holds(store, task["project_id"]) if task["status"] == "READY" else None
    finally:
        store.close()
    log = paths.task_log(home, task_id)
    data = {"task": task, "attempts": attempts, "result": result, "reason": reason, "next_step": next_step,
            "error": error, "log": str(log) if log.exists() else None}
    if as_json:
        print_json(data)
        return 0
    from rich.table import Table
    from rich.text import Text

    out = console()
    out.print(Text.assemble(shown(task["id"], "bold"), "  ", status_text(task["status"]), "  ", shown(task["title"])))
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="dim", no_wrap=True)
    grid.add_column(ratio=1, overflow="fold")
    repo = f"  repo {task['repo_id']}" if task["repo_id"] else "  (no repo)"
    grid.add_row("project", shown(task["project_id"] + repo))
    grid.add_row("priority", str(task["priority"]) + ("  requires approval" if task["requires_approval"] else ""))
    if task["assigned_agent"]:
        grid.add_row("agent", shown(task["assigned_agent"]))
    if reason:
        grid.add_row("reason", shown(reason, "yellow", multiline=True))
    if error and not reason:
        said = f"{error.get('error_type') or ''}: {error.get('error_message') or ''}".strip(": ")
        grid.add_row("error", shown(said, "red", multiline=True))
    # Every status has one, in the commands of this terminal (the stored one names tools, for a model).
    grid.add_row("next step", shown(step_for(task, error, waiting_on, paused), "bold", multiline=True))
    grid.add_row("attempts", f"{attempts} run(s); retries {task['retry_count']} of {task['max_retries']}")
    if task["branch"]:
        grid.add_row("branch", shown(task["branch"]))
    if task["pr_url"]:
        grid.add_row("PR", shown(task["pr_url"]))
    if task["depends_on"]:
        grid.add_row("depends on", shown(", ".join(task["depends_on"])))
    if task["dependents"]:
        grid.add_row("dependents", shown(", ".join(task["dependents"])))
    _best_of_rows(grid, task)
    if result is not None:
        _result_rows(grid, result, task["id"])
    if task["warning"] and (result is None or result["warning"] != task["warning"]):
        grid.add_row("warning", shown(terminal_words(task["warning"], task["id"]), "yellow", multiline=True))
    grid.add_row("log", shown(f"{log}  (agentqueue logs {task['id']})") if log.exists() else "none yet")
    out.print(grid)
    out.print(Text("description", style="dim"))
    out.print(shown(task["description"].strip()[:2000], multiline=True))
    return 0


def _result_rows(grid: Any, result: dict[str, Any], task_id: str) -> None:
    """The last run: how it ended, what it cost, its warning, summary and files."""
    cost = " · cost unknown (no price for its model)" if result["cost_usd"] is None else \
        f" · ${result['cost_usd']:.4f}" if result["cost_usd"] else ""
    cost += " · partial: counted up to where the run was cut short" if result.get("partial") else ""
    took = f" · {duration(result['duration_s'])}" if result["duration_s"] is not None else ""
    label = result["status"] + (f" ({result['error_type']})" if result["error_type"] else "")
    grid.add_row("last result", shown(f"{label} · attempt {result['attempt']}{took} · "
                                       f"{result['tokens']['total']:,} tokens{cost}"))
    if result["warning"]:
        grid.add_row("warning", shown(terminal_words(result["warning"], task_id), "yellow", multiline=True))
    if result["summary"]:
        grid.add_row("summary", shown(result["summary"].strip()[-1200:], multiline=True))
    files = result["files_changed"]
    grid.add_row("files changed", shown(", ".join(files)) if files else "none")


def _best_of_rows(grid: Any, task: dict[str, Any]) -> None:
    """A best-of-N candidate's group, or a group's candidates: each one, how it did, and why."""
    if task["candidate_of"]:
        grid.add_row("candidate of", shown(task["candidate_of"]))
    for candidate in task["candidates"]:
        lines = f" · {candidate['lines_changed']} line(s)" if candidate["lines_changed"] is not None else ""
        said = f"{candidate['task_id']} ({candidate['agent_id'] or 'any agent'}) {candidate['outcome']}{lines}"
        grid.add_row("candidate", shown(said + (f": {candidate['reason']}" if candidate["reason"] else ""),
                                        multiline=True))
