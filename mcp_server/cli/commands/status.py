"""`agentqueue status [--watch] [--json]`: the queue at a glance, read straight from the store.

Works with no daemon (it reads SQLite), says plainly when the daemon is not running, shows every
non-zero task state (the ones that need the user first), the running agents with their task and
elapsed time, and the warnings `get_status` gives. Laid out to fit 80 columns.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ... import __version__, paths
from ...services.task_states import CLAIMED, STATUS_NAMES, WORKING, in_clause
from ...visible import visible
from .. import reads as cli_reads
from ..advice import warning_words
from ..output import STYLES, console, duration, print_json, seconds_since
from ..parser import add_command, json_flag

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.text import Text

    from ...store.base import Store

STATES = list(STATUS_NAMES)


def register(sub: argparse._SubParsersAction) -> None:
    command = add_command(sub, "status", "the queue at a glance: daemon, task states, running agents, warnings", run)
    command.add_argument("--watch", action="store_true", help="refresh every second until Ctrl-C")
    json_flag(command)


def run(args: argparse.Namespace, home: Path) -> int:
    return print_status(home, as_json=args.json, watch=args.watch)


def running_tasks(store: Store, statuses: frozenset[str] = WORKING) -> list[dict[str, Any]]:
    # A view-only read: the task, its agent, and when it was claimed (its last task.assigned event).
    where, params = in_clause(statuses, "t.status")
    rows = store.all(
        "SELECT t.id AS task_id, t.title, t.project_id, t.status, t.assigned_agent AS agent_id, "
        "a.agent_type, (SELECT max(e.timestamp) FROM events e WHERE e.task_id = t.id "
        "AND e.event_type = 'task.assigned') AS started_at FROM tasks t "
        "LEFT JOIN agents a ON a.id = t.assigned_agent "
        f"WHERE {where} ORDER BY started_at", params)
    for row in rows:
        row["elapsed_s"] = round(seconds_since(row["started_at"]) or 0.0, 1)
    return rows


def _daemon(home: Path) -> dict[str, Any]:
    from ...daemon_client import daemon_info, running_daemon
    from ..daemon_code import running_code

    info = running_daemon(home)
    if info is None:
        # daemon.json outlives a daemon only when it died without cleaning up.
        return {"running": False, "crashed": daemon_info(home) is not None}
    return {"running": True, "pid": info.get("pid"), "version": info.get("version"),
            "http_url": info.get("http_url"), "started_at": info.get("started_at"),
            "uptime_s": round(seconds_since(info.get("started_at")) or 0.0),
            # Which code it runs against the installed one: its version, its store's schema, the walls it lacks.
            "code": running_code(home, info).as_json()}


def _code_warnings(daemon: dict[str, Any]) -> list[str]:
    """The daemon does not run the installed code: say so, with the command (and the walls it lacks)."""
    code = daemon.get("code") or {}
    warnings = [code["advice"]] if code.get("advice") else []
    if code.get("lacking_walls") and code.get("advice"):
        warnings.append("The running daemon lacks walls the installed code puts around runs: "
                        f"{', '.join(code['lacking_walls'])} (`agentqueue doctor` says more).")
    return warnings


def collect(home: Path, store: Store) -> dict[str, Any]:
    """Everything `status` shows, as the JSON `status --json` prints (get_status's own code over `store`)."""
    from ..client_configs import home_mismatches

    status = cli_reads.system(store).status()
    by_status = {s: 0 for s in STATES} | status["tasks"]["by_status"]
    projects = cli_reads.projects(store, limit=500)
    daemon = _daemon(home)
    running = running_tasks(store)
    warnings = _code_warnings(daemon) + list(status["warnings"])
    # Recovery requeues every claimed task, one that waited for input too (it is not in the working list).
    # On a team's shared queue the other daemons' runs are theirs, not left behind by this home's daemon.
    left = running_tasks(store, CLAIMED) if not daemon["running"] and not store.shared else []
    if left:
        warnings.append(f"{len(left)} task(s) were running when the daemon stopped; they are recovered "
                        "(work kept) when it starts again: `agentqueue serve`.")
    try:
        warnings.extend(home_mismatches(home))
    except Exception:  # a broken client config is doctor's to report; status still shows the queue
        pass
    return {
        "home": str(home), "version": __version__, "daemon": daemon,
        "orchestrator": {"state": status["orchestrator"]["state"]},
        "tasks": {"total": status["tasks"]["total"], "by_status": by_status},
        "projects": [{"id": p["id"], "name": p["name"], "status": p["status"],
                      "credit_weight": float(p["credit_weight"]),
                      "max_concurrent_agents": int(p["max_concurrent_agents"]),
                      "task_counts": {s: p["task_counts"][s] for s in STATES if p["task_counts"].get(s)}}
                     for p in projects],
        "agents": status["agents"],
        "running": running,
        "merge_queue": status.get("merge_queue", []),
        "parked": status.get("parked", []),  # agent kinds parked (a login, a limit); each is a warning line too
        "warnings": warnings,
    }


def _merge_queue(queues: list[dict[str, Any]]) -> list[Text]:
    """Per repo, one line each: the task landing, the ones waiting, the ones sent back and why."""
    from rich.text import Text

    lines: list[Text] = []
    for queue in queues:
        line = Text.assemble(("merge queue ", "bold"), visible(queue["repo_id"]), ": ")
        landing = queue["landing"]
        line.append(f"landing {visible(landing['id'])} '{visible(landing['title'])}'" if landing else "nothing landing")
        if queue["waiting"]:
            line.append(" · waiting " + ", ".join(visible(t["id"]) for t in queue["waiting"][:8])
                        + (f" +{len(queue['waiting']) - 8}" if len(queue["waiting"]) > 8 else ""))
        lines.append(line)
        for back in queue["sent_back"][:8]:
            lines.append(Text(f"  sent back {visible(back['id'])} '{visible(back['title'])}' to "
                              f"{visible(back['agent_id'] or 'any agent')}: {visible(back['why'])}", style="yellow"))
    return lines


def _counts(counts: dict[str, int], width: int = 10_000, indent: int = 0) -> Text:
    """`1 READY · 2 BLOCKED …`, broken between items only (never inside "1 AWAITING_APPROVAL")."""
    from rich.text import Text

    text = Text()
    used = 0
    for state in STATES:
        if not counts.get(state):
            continue
        item = f"{counts[state]} {state}"
        if used and used + 3 + len(item) > width:
            text.append("\n" + " " * indent)
            used = indent
        elif used:
            text.append(" · ", style="dim")
            used += 3
        text.append(item, style=STYLES.get(state, ""))
        used += len(item)
    return text or Text("no tasks", style="dim")


def _daemon_line(data: dict[str, Any]) -> Text:
    from rich.text import Text

    daemon, orchestrator = data["daemon"], data["orchestrator"]["state"]
    if daemon["running"]:
        parts = [f"daemon running (pid {daemon['pid']}, up {duration(daemon['uptime_s'])})"]
        if daemon.get("version") and daemon["version"] != __version__:
            parts.append(f"version {visible(str(daemon['version']))}")
        parts.append(f"orchestrator {orchestrator}")
        return Text(" · ".join(parts), style="yellow" if orchestrator == "paused" else "")
    crashed = "; it stopped without cleaning up, see logs/daemon.out" if daemon.get("crashed") else ""
    return Text(f"daemon not running (the orchestrator setting is '{orchestrator}': tasks start when the daemon "
                f"starts; `agentqueue serve`){crashed}", style="bold red")


def render(data: dict[str, Any], width: int = 80) -> RenderableType:
    from rich import box
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    parts: list[RenderableType] = [
        Text.assemble(("AgentQueue ", "bold"), __version__, ("  home ", "dim"), visible(data["home"])),
        _daemon_line(data),
    ]
    if data["daemon"].get("http_url"):
        parts.append(Text(f"HTTP {visible(str(data['daemon']['http_url']))}", style="dim"))
    lead = f"tasks {data['tasks']['total']}: "
    parts.append(Text.assemble((lead, "bold"), _counts(data["tasks"]["by_status"], width - len(lead), len(lead))))
    id_width = max([7, *(len(visible(p["id"])) for p in data["projects"])])
    if data["projects"] and id_width + 6 + 20 + 6 > width:  # a narrow terminal: one block per project
        parts.extend(_project_blocks(data["projects"], width))
    elif data["projects"]:
        # Only the counts wrap: ids, states and the column names are never cut.
        projects = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
        projects.add_column("project", min_width=7, max_width=30, no_wrap=True, overflow="ellipsis")
        projects.add_column("state", min_width=6, no_wrap=True)
        projects.add_column("tasks", min_width=5)
        id_width = min(30, id_width)
        counts_width = max(20, width - id_width - 6 - 6)  # two column gaps of 3
        for project in data["projects"]:
            projects.add_row(Text(visible(project["id"])),
                             Text(visible(project["status"]), "yellow" if project["status"] == "PAUSED" else ""),
                             _counts(project["task_counts"], counts_width))
        parts.append(projects)
    widest = max([0, *(len(visible(r["agent_id"] or "-")) + len(visible(r["task_id"])) + len(r["status"])
                       for r in data["running"])])
    if data["running"] and widest + 7 + 5 + 12 > width:  # a narrow terminal: one block per run
        parts.extend(_running_blocks(data["running"], width))
    elif data["running"]:
        running = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
        running.add_column("running agent", min_width=13, no_wrap=True, overflow="ellipsis", max_width=20)
        running.add_column("task", min_width=4, no_wrap=True)
        running.add_column("status", min_width=6, no_wrap=True)
        running.add_column("elapsed", min_width=7, no_wrap=True, justify="right")
        running.add_column("title", min_width=5, overflow="fold")
        for row in data["running"]:
            running.add_row(Text(visible(row["agent_id"] or "-")), Text(visible(row["task_id"])),
                            Text(visible(row["status"])), duration(row["elapsed_s"]), Text(visible(row["title"])))
        parts.append(running)
    parts.extend(_merge_queue(data.get("merge_queue", [])))
    idle = [a for a in data["agents"] if a["state"] != "BUSY"]
    if data["agents"]:
        parts.append(Text(f"agents {len(data['agents'])}: " + ", ".join(
            visible(f"{a['id']} ({a['agent_type']}, {a['state'].lower()})") for a in data["agents"])
            if len(data["agents"]) <= 4 else f"agents {len(data['agents'])}: {len(idle)} idle", style="dim"))
    else:
        parts.append(Text("agents: none registered (create_agent adds one)", style="yellow"))
    for warning in data["warnings"]:
        parts.append(Text(f"! {visible(warning_words(warning), multiline=True)}", style="yellow"))
    return Group(*parts)


def _project_blocks(projects: list[dict[str, Any]], width: int) -> list[Text]:
    """The projects for a narrow terminal: `id  STATE`, then its counts indented (ids and states never cut)."""
    from rich.text import Text

    lines: list[Text] = [Text("projects", style="bold")]
    for project in projects:
        lines.append(Text.assemble(visible(project["id"]), "  ",
                                   (visible(project["status"]), "yellow" if project["status"] == "PAUSED" else "")))
        counts = _counts(project["task_counts"], width - 2, 2)
        lines.append(Text.assemble("  ", counts))
    return lines


def _running_blocks(rows: list[dict[str, Any]], width: int) -> list[RenderableType]:
    """The running agents for a narrow terminal: `task  STATUS  elapsed`, then `agent: title` indented."""
    from rich.padding import Padding
    from rich.text import Text

    lines: list[RenderableType] = [Text("running", style="bold")]
    for row in rows:
        lines.append(Text.assemble(visible(row["task_id"]), "  ", (row["status"], STYLES.get(row["status"], "")),
                                   "  ", duration(row["elapsed_s"])))
        lines.append(Padding(Text(f"{visible(row['agent_id'] or '-')}: {visible(row['title'])}", overflow="fold"),
                             (0, 0, 0, 2)))
    return lines


def _no_data(home: Path) -> dict[str, Any]:
    return {"home": str(home), "version": __version__, "daemon": _daemon(home), "initialized": False}


def collect_held(home: Path, store: Store, found: int, expected: int) -> dict[str, Any]:
    """What `status` shows while a daemon of older code holds a store at an older schema, read without migrating
    it: the daemon and why it should be restarted, the task counts and the running agents (columns every schema
    has), nothing that needs the installed code's schema."""
    daemon = _daemon(home)
    counts = {r["status"]: int(r["n"]) for r in store.all("SELECT status, count(*) AS n FROM tasks GROUP BY status")}
    orchestrator = store.scalar("SELECT value FROM settings WHERE key = 'orchestrator_state'") or "running"
    return {
        "home": str(home), "version": __version__, "daemon": daemon, "orchestrator": {"state": orchestrator},
        "store": {"schema": found, "installed_schema": expected, "migrated": False},
        "tasks": {"total": sum(counts.values()), "by_status": {s: 0 for s in STATES} | counts},
        "projects": [], "running": running_tasks(store), "merge_queue": [], "parked": [],
        "agents": store.all("SELECT id, name, agent_type, state, current_task FROM agents ORDER BY id LIMIT 500"),
        "warnings": [*_code_warnings(daemon),
                     f"The store is at schema version {found} and the installed AgentQueue reads {expected}: it is "
                     "left as it is while the older daemon runs, so this shows only task counts and running agents."],
    }


def _open_for_status(home: Path, url: str | None) -> tuple[Store, tuple[int, int] | None]:
    """The store to show, and (found, expected) schemas when it is held at an older one by a running daemon (then a
    plain reader of the file as it is, which never migrates)."""
    from ...store.base import StoreNotMigrated
    from ...store.reader import SqliteReader, open_read_store
    from ..output import CliError
    from ..reads import may_migrate, not_migrated

    try:
        return open_read_store(paths.db_path(home), url, migrate=lambda: may_migrate(home, url)), None
    except StoreNotMigrated as error:
        if url:
            raise CliError(not_migrated(home, url, error)) from None
        return SqliteReader(paths.db_path(home)), (error.found, error.expected)


def print_status(home: Path, as_json: bool = False, watch: bool = False) -> int:
    exists, url = cli_reads.store_exists(home)  # a team's PostgreSQL queue has no file in the home
    if not exists:
        if as_json:
            print_json(_no_data(home))
        else:
            from rich.text import Text

            console().print(Text(visible(f"No AgentQueue data in {home} yet. Add it to a client (`agentqueue install "
                                         "claude-code`) or start the daemon (`agentqueue serve`).")))
        return 0
    store, held = _open_for_status(home, url)

    def gather() -> dict[str, Any]:
        return collect(home, store) if held is None else collect_held(home, store, *held)
    try:
        if as_json:
            print_json(gather())
            return 0
        out = console()
        if not watch:
            out.print(render(gather(), out.width))
            return 0
        from rich.live import Live

        try:
            with Live(render(gather(), out.width), console=out, refresh_per_second=4,
                      screen=False) as live:
                while True:
                    time.sleep(1)
                    live.update(render(gather(), out.width))
        except KeyboardInterrupt:
            return 0
    finally:
        store.close()
