"""`agentqueue tasks`: list tasks (completed ones hidden unless --all), read from the store (no daemon needed)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...visible import visible
from .. import reads as cli_reads
from ..output import STYLES, console, print_json, shown
from ..parser import add_command, json_flag

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text


def register(sub: argparse._SubParsersAction) -> None:
    command = add_command(sub, "tasks", "list tasks (completed ones hidden unless --all)", run)
    command.add_argument("--project", help="only this project's tasks")
    command.add_argument("--status", help="only these statuses (e.g. BLOCKED or READY,DEFINED)")
    command.add_argument("--all", action="store_true", help="include COMPLETED tasks")
    json_flag(command)


def run(args: argparse.Namespace, home: Path) -> int:
    return tasks(home, args.project, args.status, args.all, args.json)


def tasks(home: Path, project: str | None, status: str | None, show_all: bool, as_json: bool) -> int:
    store = cli_reads.open_store_for_reading(home)
    try:
        page = cli_reads.task_list(store, project, status, include_completed=show_all, limit=500)
    finally:
        store.close()
    if as_json:
        print_json(page)
        return 0
    from rich.text import Text

    items, total, hidden = page["tasks"], page["total"], page["hidden_completed"]
    out = console()
    if not items:
        out.print(shown("No tasks" + (f" in {project}" if project else "")
                             + (f" with status {status}" if status else "") + "."
                             + (f" {hidden} completed task(s) hidden: --all shows them." if hidden else "")))
        return 0
    if _table_width(items) + 5 > out.width:  # too narrow for the table (it would overflow): one block per task
        out.print(_task_blocks(items))
    else:
        out.print(_task_table(out, items), no_wrap=True, overflow="ignore", crop=False)
    footer = f"{len(items)} of {total} task(s)" if total > len(items) else f"{total} task(s)"
    if hidden:
        footer += f"; {hidden} completed hidden (--all shows them)"
    out.print(Text(footer, style="dim"))
    return 0


def _table_width(items: list[dict[str, Any]]) -> int:
    """The columns the table needs before its titles (as `_task_table` lays them out)."""
    return (max(4, *(len(visible(t["id"])) for t in items)) + min(20, max(7, *(len(visible(t["project_id"]))
            for t in items))) + max(6, *(len(t["status"]) for t in items)) + 3 + 4 * 3)


def _task_blocks(items: list[dict[str, Any]]) -> Any:
    """The tasks for a narrow terminal: `id  STATUS  pri N  project` (words that wrap whole), the title indented."""
    from rich.console import Group
    from rich.padding import Padding
    from rich.text import Text

    parts: list[Any] = []
    for t in items:
        parts.append(Text.assemble(visible(t["id"]), "  ", (visible(t["status"]), STYLES.get(t["status"], "")),
                                   f"  pri {t['priority']}  ", visible(t["project_id"])))
        after = f"  (after {', '.join(t['depends_on'])})" if t["depends_on"] else ""
        parts.append(Padding(Text(visible(t["title"] + after), overflow="fold"), (0, 0, 0, 2)))
    return Group(*parts)


def _task_table(console: Console, items: list[dict[str, Any]]) -> Text:
    """The task list as aligned columns. Laid out here rather than by rich's Table, which measures and renders
    every cell on its own (0.4 s for 500 rows, most of `agentqueue tasks`): ids, statuses and priorities are
    never cut, a long project id is shortened with "…", and only titles wrap (a long word breaks)."""
    from rich.cells import cell_len, set_cell_size
    from rich.text import Span, Text

    def width(text: str) -> int:
        return len(text) if text.isascii() else cell_len(text)

    def fit(text: str, size: int) -> str:  # padded (or cut) to `size` cells
        return text.ljust(size) if text.isascii() and len(text) <= size else set_cell_size(text, size)

    rows = [(visible(t["id"]), visible(t["project_id"]), visible(t["status"]), str(t["priority"]),
             visible(t["title"] + (f"  (after {', '.join(t['depends_on'])})" if t["depends_on"] else "")))
            for t in items]
    gap = "   "
    w_id = max(4, *(width(r[0]) for r in rows))
    w_project = min(20, max(7, *(width(r[1]) for r in rows)))
    w_status = max(6, *(width(r[2]) for r in rows))
    w_pri = max(3, *(len(r[3]) for r in rows))
    indent = w_id + w_project + w_status + w_pri + 4 * len(gap)
    w_title = max(5, console.width - indent)
    header = gap.join((fit("task", w_id), fit("project", w_project), fit("status", w_status), "pri".rjust(w_pri),
                       "title"))
    parts = [header, "\n", "─" * min(console.width, indent + w_title), "\n"]
    spans = [Span(0, len(header), "bold")]
    at = sum(len(p) for p in parts)
    for task_id, project, status, priority, title in rows:
        if width(project) > w_project:
            project = set_cell_size(project, w_project - 1) + "…"
        lines = [title] if width(title) <= w_title else \
            [line.plain.rstrip() for line in Text(title).wrap(console, w_title, overflow="fold")]
        lead = fit(task_id, w_id) + gap + fit(project, w_project) + gap
        shown_status = fit(status, w_status)
        if STYLES.get(status):
            spans.append(Span(at + len(lead), at + len(lead) + len(shown_status), STYLES[status]))
        row = lead + shown_status + gap + priority.rjust(w_pri) + gap + lines[0] + "\n" + \
            "".join(" " * indent + line + "\n" for line in lines[1:])
        parts.append(row)
        at += len(row)
    return Text("".join(parts).rstrip("\n"), spans=spans)
