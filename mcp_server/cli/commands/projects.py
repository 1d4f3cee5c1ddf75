"""`agentqueue projects`: every project with its state, repos and task counts, read from the store (no daemon)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ...services.task_states import STATUS_NAMES
from ...visible import visible
from .. import reads as cli_reads
from ..output import STYLES, console, print_json
from ..parser import add_command, json_flag

FIELDS = ("id", "name", "status", "credit_weight", "max_concurrent_agents", "budget_limit", "workspace",
          "default_repo_id", "task_counts", "created_at", "updated_at")


def register(sub: argparse._SubParsersAction) -> None:
    command = add_command(sub, "projects", "list the projects: state, repos, task counts", run)
    json_flag(command)


def run(args: argparse.Namespace, home: Path) -> int:
    store = cli_reads.open_store_for_reading(home)
    try:
        rows = cli_reads.projects(store)
        repos: dict[str, list[str]] = {}
        for repo in store.all("SELECT id, project_id FROM repos ORDER BY created_at, id LIMIT 2000"):
            repos.setdefault(repo["project_id"], []).append(repo["id"])
    finally:
        store.close()
    projects = [{**{k: p.get(k) for k in FIELDS}, "repos": repos.get(p["id"], [])} for p in rows]
    if args.json:
        print_json({"projects": projects, "total": len(projects)})
        return 0
    from rich.text import Text

    out = console()
    if not projects:
        out.print(Text("No projects yet. Ask your client to create one (create_project)."))
        return 0
    for project in projects:
        # One block per project (never a table): an id or a state is never cut, at any width.
        line = Text.assemble((visible(project["id"]), "bold"), "  ",
                             (project["status"], "yellow" if project["status"] == "PAUSED" else ""))
        if project["name"] != project["id"]:
            line.append("  " + visible(project["name"]))
        out.print(line)
        repo_ids = project["repos"]
        out.print(Text("  repos: " + (", ".join(visible(r) for r in repo_ids) if repo_ids
                                      else "none (tasks run in its scratch folder)"), style="dim"))
        counts = Text("  tasks: ")
        shown = [s for s in STATUS_NAMES if project["task_counts"].get(s)]
        for n, state in enumerate(shown):
            counts.append((" · " if n else "") + f"{project['task_counts'][state]} {state}", STYLES.get(state, ""))
        out.print(counts if shown else Text("  tasks: none", style="dim"))
    out.print(Text(f"{len(projects)} project(s). `agentqueue add TITLE --project ID` queues a task.", style="dim"))
    return 0
