"""`agentqueue usage`: tokens and cost, by project (by task for --project, by agent for --task)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ...visible import visible
from ..output import console, open_services, print_json, shown
from ..parser import add_command, json_flag


def register(sub: argparse._SubParsersAction) -> None:
    command = add_command(sub, "usage", "tokens and cost, by project (or by task for --project)", run)
    command.add_argument("--project", help="one project, broken down by task")
    command.add_argument("--task", help="one task, broken down by agent")
    command.add_argument("--since", type=float, metavar="HOURS", help="only the last HOURS hours")
    json_flag(command)


def run(args: argparse.Namespace, home: Path) -> int:
    return usage(home, args.project, args.task, args.since, args.json)


def included(total: dict[str, int | float]) -> str:
    """What the figures hold besides whole runs: runs cut short (counted up to where they stopped), runs of a model
    with no known price (their tokens count, their cost does not)."""
    parts = []
    if total.get("partial_runs"):
        parts.append(f"* includes {total['partial_runs']} partial run(s): killed, stopped or timed out, counted up to "
                     "where they stopped")
    if total.get("unpriced_runs"):
        parts.append(f"+? the cost leaves out {total['unpriced_runs']} run(s) of a model with no known price "
                     "(their tokens are counted)")
    return "\n".join(parts)


def usage(home: Path, project: str | None, task: str | None, since: float | None, as_json: bool) -> int:
    services = open_services(home)
    try:
        if project is not None:
            services.projects.get(project)
        if task is not None:
            services.tasks.get(task)
        summary = services.usage.summary(project_id=project, task_id=task, since_hours=since)
    finally:
        services.close()
    if as_json:
        print_json({"project_id": project, "task_id": task, "since_hours": since, **summary})
        return 0
    from rich import box
    from rich.table import Table
    from rich.text import Text

    out = console()
    total = summary["total"]
    scope = f"task {task}" if task else f"project {project}" if project else "all projects"
    window = f", last {since:g} h" if since else ""
    out.print(Text.assemble(("Token usage", "bold"), visible(f" ({scope}{window}): "), f"{total['total']:,} tokens",
                                f" · ${total['cost_usd']:.4f}", (f"  (in {total['input']:,} · out {total['output']:,}"
                                f" · cache read {total['cache_read']:,} · write {total['cache_write']:,})", "dim")))
    note = included(total)
    if note:
        out.print(Text(note, style="dim"))
    if not summary["breakdown"]:
        out.print(Text("No runs recorded" + (" in that window." if since else " yet."), style="dim"))
        return 0
    group = [k for k in ("project_id", "task_id", "agent_id") if k in summary["breakdown"][0]]
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for key in group:
        table.add_column(key.removesuffix("_id"), no_wrap=True, overflow="ellipsis", min_width=4)
    for name in ("runs", "tokens", "cost $"):
        table.add_column(name, justify="right", no_wrap=True, min_width=len(name))
    for row in summary["breakdown"]:
        marks = "*" if row.get("partial_runs") else ""
        table.add_row(*[shown(str(row[k] or "-")) for k in group], str(row["runs"]), f"{row['total']:,}{marks}",
                      f"{row['cost_usd']:.4f}" + ("+?" if row.get("unpriced_runs") else ""))
    out.print(table)
    return 0
