"""The CLI's read commands: tasks, show, logs, diff, usage. They read the store directly (no daemon needed)."""

from __future__ import annotations

import codecs
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import cli_reads, paths
from .services.task_states import FOLLOWABLE, NEEDS_PERSON
from .cli_output import duration, open_services, print_json
from .visible import visible

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

    from .store.base import Store

# rich costs a read tens of milliseconds to import: `--json` never does, the text views import it when they print.


def log_path(home: Path, task_id: str) -> Path:
    return paths.task_log(home, task_id)


def _status(status: str) -> Text:
    from rich.text import Text

    from .status_view import STYLES

    return Text(status, style=STYLES.get(status, ""))


def _shown(text: str, style: str = "", multiline: bool = False) -> Text:
    """Text from the store (a task's, an agent's, a repo's) as a rich Text: no markup, no escapes act."""
    from rich.text import Text

    return Text(visible(text, multiline), style=style)


# -- tasks --------------------------------------------------------------------------------------------
def tasks(home: Path, project: str | None, status: str | None, show_all: bool, as_json: bool) -> int:
    store = cli_reads.open_store_for_reading(home)
    try:
        page = cli_reads.task_list(store, project, status, include_completed=show_all, limit=500)
    finally:
        store.close()
    if as_json:
        print_json(page)
        return 0
    from rich.console import Console
    from rich.text import Text

    items, total, hidden = page["tasks"], page["total"], page["hidden_completed"]
    console = Console()
    if not items:
        console.print(_shown("No tasks" + (f" in {project}" if project else "")
                             + (f" with status {status}" if status else "") + "."
                             + (f" {hidden} completed task(s) hidden: --all shows them." if hidden else "")))
        return 0
    console.print(_task_table(console, items), no_wrap=True, overflow="ignore", crop=False)
    footer = f"{len(items)} of {total} task(s)" if total > len(items) else f"{total} task(s)"
    if hidden:
        footer += f"; {hidden} completed hidden (--all shows them)"
    console.print(Text(footer, style="dim"))
    return 0


def _task_table(console: Console, items: list[dict[str, Any]]) -> Text:
    """The task list as aligned columns. Laid out here rather than by rich's Table, which measures and renders
    every cell on its own (0.4 s for 500 rows, most of `agentqueue tasks`): ids, statuses and priorities are
    never cut, a long project id is shortened with "…", and only titles wrap (a long word breaks)."""
    from rich.cells import cell_len, set_cell_size
    from rich.text import Span, Text

    from .status_view import STYLES

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


# -- show ---------------------------------------------------------------------------------------------
def show(home: Path, task_id: str, as_json: bool) -> int:
    store = cli_reads.open_store_for_reading(home)
    try:
        task = cli_reads.task(store, task_id)
        attempts, result = cli_reads.last_result(store, task_id)
        reason, next_step = task["reason"], task["next_step"]
        error = None
        if task["status"] in NEEDS_PERSON and result is not None and result["status"] != "completed":
            error = cli_reads.agent_error(store, task_id)
    finally:
        store.close()
    log = log_path(home, task_id)
    data = {"task": task, "attempts": attempts, "result": result, "reason": reason, "next_step": next_step,
            "error": error, "log": str(log) if log.exists() else None}
    if as_json:
        print_json(data)
        return 0
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console()
    console.print(Text.assemble(_shown(task["id"], "bold"), "  ", _status(task["status"]), "  ", _shown(task["title"])))
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="dim", no_wrap=True)
    grid.add_column(ratio=1, overflow="fold")
    grid.add_row("project", _shown(task["project_id"] + (f"  repo {task['repo_id']}" if task["repo_id"] else "  (no repo)")))
    grid.add_row("priority", str(task["priority"]) + ("  requires approval" if task["requires_approval"] else ""))
    if task["assigned_agent"]:
        grid.add_row("agent", _shown(task["assigned_agent"]))
    if reason:
        grid.add_row("reason", _shown(reason, "yellow", multiline=True))
    if next_step:
        grid.add_row("next step", _shown(next_step, "bold", multiline=True))
    if error and not reason:
        said = f"{error.get('error_type') or ''}: {error.get('error_message') or ''}".strip(": ")
        grid.add_row("error", _shown(said, "red", multiline=True))
        if error.get("suggested_fix"):
            grid.add_row("fix", _shown(error["suggested_fix"], multiline=True))
    grid.add_row("attempts", f"{attempts} run(s); retries {task['retry_count']} of {task['max_retries']}")
    if task["branch"]:
        grid.add_row("branch", _shown(task["branch"]))
    if task["pr_url"]:
        grid.add_row("PR", _shown(task["pr_url"]))
    if task["depends_on"]:
        grid.add_row("depends on", _shown(", ".join(task["depends_on"])))
    if task["dependents"]:
        grid.add_row("dependents", _shown(", ".join(task["dependents"])))
    if result is not None:
        cost = f" · ${result['cost_usd']:.4f}" if result["cost_usd"] else ""
        took = f" · {duration(result['duration_s'])}" if result["duration_s"] is not None else ""
        label = result["status"] + (f" ({result['error_type']})" if result["error_type"] else "")
        grid.add_row("last result", _shown(f"{label} · attempt {result['attempt']}{took} · "
                                           f"{result['tokens']['total']:,} tokens{cost}"))
        if result["warning"]:
            grid.add_row("warning", _shown(result["warning"], "yellow", multiline=True))
        if result["summary"]:
            grid.add_row("summary", _shown(result["summary"].strip()[-1200:], multiline=True))
        files = result["files_changed"]
        grid.add_row("files changed", _shown(", ".join(files)) if files else "none")
    grid.add_row("log", _shown(f"{log}  (agentqueue logs {task['id']})") if log.exists() else "none yet")
    console.print(grid)
    console.print(Text("description", style="dim"))
    console.print(_shown(task["description"].strip()[:2000], multiline=True))
    return 0


# -- logs ---------------------------------------------------------------------------------------------
def logs(home: Path, task_id: str, follow: bool, as_json: bool) -> int:
    store = cli_reads.open_store_for_reading(home)
    try:
        status = cli_reads.task_status(store, task_id)  # a clear error for an unknown id
        path = log_path(home, task_id)
        if not follow:
            text = path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
            if as_json:
                print_json({"task_id": task_id, "status": status, "path": str(path),
                            "exists": path.exists(), "text": text})
            elif text:
                sys.stdout.write(visible(text, multiline=True))
            else:
                print(visible(f"No log yet for {task_id} ({status}): no agent has run it. "
                              f"`agentqueue logs {task_id} -f` waits for one."), file=sys.stderr)
            return 0
        return _follow(store, task_id, path, as_json)
    finally:
        store.close()


def _json_line(task_id: str, line: bytes) -> str:
    # ensure_ascii: the line's escapes and controls arrive as \u001b, never raw.
    return json.dumps({"task_id": task_id, "line": line.decode("utf-8", "replace")}, ensure_ascii=True) + "\n"


def _follow(store: Store, task_id: str, path: Path, as_json: bool) -> int:
    """Print the log as the agent writes it; stop once the task can produce no more (or on Ctrl-C)."""
    offset, pending = 0, b""
    announced = False
    out = sys.stdout
    # Chunks end anywhere: a character cut in two is decoded once whole, and a trailing \r waits for the
    # next chunk to tell a CRLF line end (kept) from a line overwriting itself (shown as \r).
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    held = ""
    try:
        while True:
            status = cli_reads.task_status(store, task_id)  # read before the file: its last lines precede the change
            if path.exists():
                with path.open("rb") as handle:
                    handle.seek(offset)
                    chunk = handle.read()
                offset += len(chunk)
                if chunk:
                    if as_json:
                        pending += chunk
                        *lines, pending = pending.split(b"\n")
                        for line in lines:
                            out.write(_json_line(task_id, line))
                    else:
                        text = held + decoder.decode(chunk)
                        text, held = (text[:-1], "\r") if text.endswith("\r") else (text, "")
                        out.write(visible(text, multiline=True))
                    out.flush()
            if status not in FOLLOWABLE:
                if not as_json and (rest := held + decoder.decode(b"", final=True)):
                    out.write(visible(rest, multiline=True))
                    out.flush()
                if as_json and pending:
                    out.write(_json_line(task_id, pending))
                print(f"[{task_id} is {status}]", file=sys.stderr, flush=True)
                return 0
            if status == "READY" and not announced:
                print(f"Waiting for {task_id} to start (READY)… Ctrl-C stops following.", file=sys.stderr, flush=True)
                announced = True
            time.sleep(0.2)
    except KeyboardInterrupt:
        out.flush()
        return 0


# -- diff ---------------------------------------------------------------------------------------------
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
        from rich.console import Console
        from rich.syntax import Syntax

        Console().print(Syntax(text, "diff", theme="ansi_dark", background_color="default", word_wrap=True))
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0


# -- usage --------------------------------------------------------------------------------------------
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
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console()
    total = summary["total"]
    scope = f"task {task}" if task else f"project {project}" if project else "all projects"
    window = f", last {since:g} h" if since else ""
    console.print(Text.assemble(("Token usage", "bold"), visible(f" ({scope}{window}): "), f"{total['total']:,} tokens",
                                f" · ${total['cost_usd']:.4f}", (f"  (in {total['input']:,} · out {total['output']:,}"
                                f" · cache read {total['cache_read']:,} · write {total['cache_write']:,})", "dim")))
    if not summary["breakdown"]:
        console.print(Text("No runs recorded" + (" in that window." if since else " yet."), style="dim"))
        return 0
    group = [k for k in ("project_id", "task_id", "agent_id") if k in summary["breakdown"][0]]
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for key in group:
        table.add_column(key.removesuffix("_id"), no_wrap=True, overflow="ellipsis", min_width=4)
    for name in ("runs", "tokens", "cost $"):
        table.add_column(name, justify="right", no_wrap=True, min_width=len(name))
    for row in summary["breakdown"]:
        table.add_row(*[_shown(str(row[k] or "-")) for k in group], str(row["runs"]), f"{row['total']:,}",
                      f"{row['cost_usd']:.4f}")
    console.print(table)
    return 0
