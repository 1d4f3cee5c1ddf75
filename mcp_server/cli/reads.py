"""What `agentqueue tasks`, `show` and `status` read, as plain dicts, over any store and with no heavy import.

Each function answers what the service behind the matching tool answers (list_tasks, get_task with
get_task_result and get_agent_error, get_status), in the JSON shape of its model, so `--json` prints
the same document either way; tests/test_cli_reads.py holds the two side by side on one store. The
rules (statuses, failure wording, status warnings) are the services' own modules, imported here:
task_states, failures and system import nothing heavy.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from .. import paths
from ..services import candidates
from ..services.errors import InvalidInputError, NotFoundError
from ..services.limits import MAX_NAME
from ..services.failures import error_report
from ..services.routing import capability_list, covers
from ..services.system import ORCHESTRATOR_KEY, System, task_warning
from ..services.task_states import EXPLAINED, STATUS_EVENTS, list_filter, parse_statuses
from ..store.base import Store

# A task's fields as get_task gives them (store.models.Task), in that order: the row's other columns stay out.
TASK_FIELDS = ("id", "project_id", "title", "description", "status", "priority", "repo_id", "branch",
               "assigned_agent", "agent_type", "capabilities", "model", "depends_on", "dependents", "retry_count",
               "max_retries",
               "requires_approval", "pr_url", "resume_after", "reason", "next_step", "parent_task_id",
               "best_of", "pick", "chosen", "candidate_of", "candidates",
               "pending_requests", "sandbox_denials", "warning", "created_at", "updated_at")
REQUEST_FIELDS = ("id", "task_id", "project_id", "agent_id", "tool", "input", "action", "description",
                  "suggested_rule", "status", "decided_by", "message", "created_at", "expires_at", "answered_at")
TOKEN_FIELDS = ("input", "output", "cache_read", "cache_write", "total")


def no_data(home: Path) -> str:
    return (f"No AgentQueue data in {home} yet. Add it to a client (`agentqueue install claude-code`) "
            "or start the daemon (`agentqueue serve`); set AGENTQUEUE_HOME if your data lives elsewhere.")


def store_exists(home: Path) -> tuple[bool, str | None]:
    """(whether the home has a store to read, its database URL): a team's PostgreSQL queue (`[team] database_url`)
    always has one, a home of its own has one once its SQLite file exists."""
    url = read_settings_url(home)
    return bool(url) or paths.db_path(home).exists(), url


def open_store_for_reading(home: Path) -> Store:
    """The home's store for a read: refuses (rather than creating an empty one) when there is none, and refuses to
    migrate one that a running daemon holds (it runs older code: the terminal never changes its store under it)."""
    from .output import CliError
    from ..store.base import StoreNotMigrated
    from ..store.reader import open_read_store

    exists, url = store_exists(home)
    if not exists:
        raise CliError(no_data(home))
    try:
        return open_read_store(paths.db_path(home), url, migrate=lambda: may_migrate(home, url))
    except StoreNotMigrated as error:
        raise CliError(not_migrated(home, url, error)) from None


def may_migrate(home: Path, url: str | None) -> bool:
    """Whether a terminal command may migrate the home's store: only SQLite with no daemon holding the home (with
    one, it is a daemon of older code: a daemon migrates its store when it starts). A team's PostgreSQL database is
    migrated only by its daemons, which may run on other machines."""
    from ..home_lock import is_held

    return not url and not is_held(home)


def not_migrated(home: Path, url: str | None, error: Any) -> str:
    """The refusal of a store left at an older schema: the daemon holding it runs older code, or (a team's database)
    the daemons have not migrated it yet."""
    from .daemon_code import held_store

    if not url:
        return held_store(home, error.found, error.expected)
    return (f"{error} The terminal never migrates a team's shared database: a daemon of this version does when it "
            "starts. Upgrade AgentQueue for every daemon of the team, then `agentqueue restart-daemon` on each.")


def read_settings_url(home: Path) -> str | None:
    """The store's URL for a read. A bad value elsewhere in config.toml is said once on stderr (the daemon keeps
    running on the settings it has) and does not stop the read."""
    from .. import settings
    from ..visible import visible

    try:
        return settings.load(home).database_url
    except settings.ConfigError as error:
        print(f"agentqueue: {visible(str(error), multiline=True)} (`agentqueue doctor` checks the file.)",
              file=sys.stderr)
        return settings.store_url(home)


def _no_such_id(what: str, given: str) -> None:
    """An id longer than any id can be names nothing: said without echoing it whole (the tools' gate says the same)."""
    if len(given) > MAX_NAME:
        raise InvalidInputError(f"The {what} id given is {len(given):,} characters long ('{given[:40]}…'), and "
                                f"AgentQueue's ids are at most {MAX_NAME}: it names no {what}. Pass an id as "
                                f"`agentqueue {'tasks' if what == 'task' else 'projects'}` shows it.")


def _task_row(store: Store, task_id: str) -> dict[str, Any]:
    _no_such_id("task", task_id)
    row = store.one("SELECT * FROM tasks WHERE id = ?", (task_id,))
    if row is None:
        raise NotFoundError(f"Task '{task_id}' not found. list_tasks shows task ids.")
    return row


def _project_exists(store: Store, project_id: str) -> None:
    _no_such_id("project", project_id)
    if store.scalar("SELECT 1 FROM projects WHERE id = ?", (project_id,)) is None:
        raise NotFoundError(f"Project '{project_id}' not found. list_projects shows project ids.")


def _counts(store: Store, project_id: str | None) -> dict[str, int]:
    """Tasks per status from the trigger-kept counts (Tasks.status_counts)."""
    where, params = ("WHERE project_id = ?", (project_id,)) if project_id is not None else ("", ())
    return {r["status"]: int(r["n"]) for r in store.all(
        f"SELECT status, sum(n) AS n FROM task_counts {where} GROUP BY status HAVING sum(n) > 0", params)}


# -- tasks --------------------------------------------------------------------------------------------
def task_list(store: Store, project_id: str | None = None, status: str | None = None,
              include_completed: bool = False, limit: int = 50, offset: int = 0) -> dict[str, Any]:
    """list_tasks: {tasks (TaskSummary dicts), total, hidden_completed} (as Tasks.list)."""
    statuses = parse_statuses(status)
    if project_id is not None:
        _project_exists(store, project_id)
    where, params, total, hidden = list_filter(project_id, statuses, include_completed, _counts(store, project_id))
    rows = store.all(f"SELECT id, project_id, title, status, priority, assigned_agent FROM tasks WHERE {where} "
                     "ORDER BY priority, created_at, id LIMIT ? OFFSET ?", (*params, limit, offset))
    deps: dict[str, list[str]] = {r["id"]: [] for r in rows}
    if rows:
        marks = ",".join("?" * len(rows))
        for d in store.all(f"SELECT task_id, depends_on FROM task_dependencies WHERE task_id IN ({marks}) "
                           "ORDER BY depends_on", [r["id"] for r in rows]):
            deps[d["task_id"]].append(d["depends_on"])
    tasks = [{**r, "priority": int(r["priority"]), "depends_on": deps[r["id"]]} for r in rows]
    return {"tasks": tasks, "total": total, "hidden_completed": hidden}


def statuses(store: Store, task_ids: list[str]) -> list[dict[str, Any]]:
    """[{id, status}] of these tasks (a DEFINED task's dependencies), in the order given."""
    if not task_ids:
        return []
    found = {r["id"]: r["status"] for r in store.all(
        f"SELECT id, status FROM tasks WHERE id IN ({','.join('?' * len(task_ids))})", task_ids)}
    return [{"id": t, "status": found[t]} for t in task_ids if t in found]


def what_holds(store: Store, project_id: str) -> str | None:
    """"project" when the task's project is paused, "orchestrator" when everything is, else None."""
    if store.scalar("SELECT status FROM projects WHERE id = ?", (project_id,)) == "PAUSED":
        return "project"
    return "orchestrator" if store.get_setting(ORCHESTRATOR_KEY, "running") == "paused" else None


def task_status(store: Store, task_id: str) -> str:
    """A task's status (what `logs -f` polls), or get_task's refusal for an unknown id."""
    return str(_task_row(store, task_id)["status"])


# -- show ---------------------------------------------------------------------------------------------
def task(store: Store, task_id: str) -> dict[str, Any]:
    """get_task (as Tasks.get)."""
    row = _task_row(store, task_id)
    pending = [{**{k: r[k] for k in REQUEST_FIELDS}, "input": json.loads(r["input"] or "{}")} for r in store.all(
        "SELECT * FROM permission_requests WHERE task_id = ? AND status = 'pending' ORDER BY created_at", (task_id,))]
    refused = [r["message"] for r in store.all(
        "SELECT message FROM audit_log WHERE task_id = ? AND action = 'sandbox:deny' ORDER BY time DESC LIMIT 20",
        (task_id,))]
    extra = {
        "depends_on": [r["depends_on"] for r in store.all(
            "SELECT depends_on FROM task_dependencies WHERE task_id = ? ORDER BY depends_on", (task_id,))],
        "dependents": [r["task_id"] for r in store.all(
            "SELECT task_id FROM task_dependencies WHERE depends_on = ? ORDER BY task_id", (task_id,))],
        "requires_approval": bool(row["requires_approval"]), "pending_requests": pending, "sandbox_denials": refused,
        "candidates": candidates.listing(store, row) if row.get("best_of") else [],
        "warning": task_warning(store, row),
        "capabilities": capability_list(row.get("capabilities")),
    }
    return {k: extra[k] if k in extra else row.get(k) for k in TASK_FIELDS}


def last_result(store: Store, task_id: str) -> tuple[int, dict[str, Any] | None]:
    """get_task_result: (attempts, the last result as TaskResult's dict, or None) (as Tasks.results)."""
    _task_row(store, task_id)
    attempts = int(store.scalar("SELECT count(*) FROM task_results WHERE task_id = ?", (task_id,)))
    row = store.one("SELECT * FROM task_results WHERE task_id = ? ORDER BY attempt DESC, id DESC LIMIT 1", (task_id,))
    if row is None:
        return attempts, None
    return attempts, {
        "status": row["status"], "summary": row["summary"], "files_changed": json.loads(row["files_changed"] or "[]"),
        "error_type": row["error_type"], "error_message": row["error_message"], "warning": row.get("warning"),
        "tokens": {k: int(row[k] or 0) for k in TOKEN_FIELDS},
        "cost_usd": None if row["cost_usd"] is None else float(row["cost_usd"]), "partial": bool(row.get("partial")),
        "duration_s": None if row["duration_s"] is None else float(row["duration_s"]), "agent_id": row["agent_id"],
        "attempt": int(row["attempt"]), "created_at": row["created_at"],
    }


def agent_error(store: Store, task_id: str) -> dict[str, Any]:
    """get_agent_error (as Tasks.agent_error: the same failures.error_report)."""
    row = _task_row(store, task_id)
    _, result = last_result(store, task_id)
    code = None
    if row["status"] in EXPLAINED and row["reason"]:
        payload = store.scalar("SELECT payload FROM events WHERE task_id = ? AND event_type = ? ORDER BY id DESC "
                               "LIMIT 1", (task_id, STATUS_EVENTS[row["status"]]))
        code = json.loads(payload).get("reason") if payload else None
    return error_report(row, result, code)


# -- status -------------------------------------------------------------------------------------------
class AgentRows:
    """What System reads of the agents (Agents.list and can_run), as plain rows instead of models."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def list(self, limit: int = 50, offset: int = 0) -> tuple[list[Any], int]:
        total = int(self.store.scalar("SELECT count(*) FROM agents"))
        rows = self.store.all("SELECT id, name, agent_type, state, current_task, repo_id, capabilities FROM agents "
                              "ORDER BY created_at, id LIMIT ? OFFSET ?", (limit, offset))
        return [SimpleNamespace(**{**r, "capabilities": json.loads(r["capabilities"] or "[]")}) for r in rows], total

    def can_run(self, agent: Any, task_agent_type: str | None, task_repo_id: str | None,
                task_capabilities: str | None = None) -> bool:
        # Agents.can_run, word for word (that module imports pydantic).
        if task_agent_type and agent.agent_type != task_agent_type:
            return False
        if not covers(agent.capabilities, task_capabilities):
            return False
        return not (agent.repo_id and task_repo_id and agent.repo_id != task_repo_id)


def system(store: Store) -> System:
    """get_status's own code (services.system) over this store."""
    return System(store, AgentRows(store))  # type: ignore[arg-type]


def projects(store: Store, limit: int = 500) -> list[dict[str, Any]]:
    """list_projects' rows with their task counts (as Projects.list)."""
    rows = store.all("SELECT * FROM projects ORDER BY created_at, id LIMIT ?", (limit,))
    return [{**r, "task_counts": {c["status"]: int(c["n"]) for c in store.all(
        "SELECT status, n FROM task_counts WHERE project_id = ? AND n > 0", (r["id"],))}} for r in rows]
