"""The orchestrator switch (persisted) and the one-glance status of the whole queue.

Imports nothing heavy (no pydantic, sqlite-utils or git): the terminal's `agentqueue status` builds it
over a plain read-only store (cli/reads.py) and prints what get_status says, word for word.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from datetime import datetime, timedelta, UTC
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import send_backs
from .errors import ServiceError
from .parking import Parking, parked_line
from .task_states import CLAIMED, EXPLAINED, STATUS_NAMES, in_clause, ordered
from .routing import capability_list

if TYPE_CHECKING:
    from ..store.base import Store
    from .agents import Agents

ORCHESTRATOR_KEY = "orchestrator_state"
# No run is claimed while AgentQueue's home has less free than this (engine/stranded.py): a run needs its worktree,
# its log and its store rows there.
MIN_FREE_BYTES = 8 << 20
HELD_LINES = 10  # get_status lists at most this many held tasks, then says how many more


def held_line(task: dict[str, Any]) -> str:
    """One warning line: the task, its status, why, and what to do."""
    reason = task["reason"] or "no reason was recorded (it was held before AgentQueue kept reasons)."
    next_step = task["next_step"] or f"get_agent_error {task['id']}; restart_task {task['id']} runs it again."
    return f"Task {task['id']} '{task['title']}' is {task['status']}: {reason} Next: {next_step}"


def sent_back_why(payload: dict[str, Any]) -> str:
    """A few words on why the merge queue sent a task back: `conflict in a.py (1 of 2)`."""
    files = ", ".join(str(f) for f in (payload.get("conflicts") or [])[:5])
    what = {"conflict": f"conflict in {files}", "unresolved": f"conflict markers left in {files}",
            "check": f"check `{str(payload.get('check') or '')[:80]}` failed"}.get(str(payload.get("kind")),
                                                                                str(payload.get("kind")))
    if "spends" in payload and payload["spends"] is None:  # a conflict with work that landed since a resolution
        return f"{what} (no retry spent; {payload.get('attempt')} of at most {payload.get('cap')} such)"
    return f"{what} ({payload.get('attempt')} of {payload.get('cap')})"


def free_bytes(home: Path) -> int | None:
    try:
        stat = os.statvfs(home)
    except OSError:
        return None
    return stat.f_bavail * stat.f_frsize


def room_warning(home: Path) -> str | None:
    """The warning while the home's disk is (nearly) full: no run starts, and what to do."""
    free = free_bytes(home)
    if free is None or free >= MIN_FREE_BYTES:
        return None
    return (f"AgentQueue's home {home} has {free >> 10} KiB free: no run starts until {MIN_FREE_BYTES >> 20} MiB are "
            "free (the disk is full). Free space on that disk; runs start again by themselves.")


def no_repo_warning(project_id: str, workspace: str | None) -> str:
    """What a task of a project with no repo carries (issue 23): a model whose add_repo failed should not find out
    from a COMPLETED task whose file sits where nobody looks."""
    return (f"Project '{project_id}' has no repo: this task runs in the project's scratch folder {workspace}, not in "
            "a git repo, so nothing it writes lands anywhere. For code work: add_repo, then edit_task repo_id.")


def task_warning(store: Any, row: dict[str, Any]) -> str | None:
    """A task's `warning`: the no-repo one while its project has no repo (a task resolves its repo when claimed)."""
    if row["repo_id"] is not None:
        return None
    project = store.one("SELECT workspace FROM projects p WHERE id = ? AND NOT EXISTS "
                        "(SELECT 1 FROM repos WHERE project_id = p.id)", (row["project_id"],))
    return no_repo_warning(row["project_id"], project["workspace"]) if project else None


class System:
    def __init__(self, store: Store, agents: Agents, restart: Callable[[], None] | None = None,
                 home: Path | None = None) -> None:
        self.store = store
        self.agents = agents
        self.restart = restart  # the daemon's: re-execute itself (absent in standalone and in-memory servers)
        self.home = home  # whose free space get_status reports when runs wait for it

    def notify_test(self) -> list[dict[str, Any]]:
        """A test message to every [notify] URL, now; each one's result (notify/follower.py's send_test)."""
        from ..notify.follower import send_test  # Apprise and the outbox: only when asked

        results = send_test(self.store, self.agents.settings)
        if not results:
            raise ServiceError("No notifier is configured: add [notify] urls = [\"ntfy://ntfy.sh/your-topic\"] (any "
                               "Apprise URL) to config.toml (a running daemon reads it within a second), then try "
                               "again.")
        return results

    def request_restart(self) -> None:
        if self.restart is None:
            raise ServiceError(
                "restart_daemon needs the AgentQueue daemon (`agentqueue serve`, which `agentqueue mcp` starts); "
                "this server runs standalone. Restart the client's server instead."
            )
        with self.store.transaction():
            self.store.add_event("daemon.restarting")
        self.restart()

    def orchestrator_state(self) -> str:
        return self.store.get_setting(ORCHESTRATOR_KEY, "running") or "running"

    def running_tasks(self) -> int:
        claimed, params = in_clause(CLAIMED)
        return int(self.store.scalar(f"SELECT coalesce(sum(n), 0) FROM task_counts WHERE {claimed}", params))

    def unpark(self) -> list[dict[str, Any]]:
        """A person resumes the queue: every parked agent kind too (services/parking.py); the kinds resumed."""
        return Parking(self.store).resume("person")

    def set_orchestrator(self, state: str) -> str:
        """'paused' stops new task runs and llm hook actions; running agents finish."""
        if state != self.orchestrator_state():
            with self.store.transaction():
                self.store.set_setting(ORCHESTRATOR_KEY, state)
                self.store.add_event(f"orchestrator.{'paused' if state == 'paused' else 'resumed'}")
        return state

    def warnings(self) -> list[str]:
        warnings = []
        # The kinds of agent READY tasks need (a handful), from a partial index; rows are read only for
        # the kinds no agent can run.
        kinds = self.store.all("SELECT DISTINCT agent_type, repo_id, capabilities FROM tasks WHERE status = 'READY'")
        agents, _ = self.agents.list(limit=500)
        orphans = [k for k in kinds if not any(self.agents.can_run(a, k["agent_type"], k["repo_id"], k["capabilities"])
                                               for a in agents)]
        if orphans:
            stuck = [self.store.one("SELECT count(*) AS n, min(id) AS example FROM tasks WHERE status = 'READY' "
                                    "AND agent_type IS ? AND repo_id IS ? AND capabilities IS ?",
                                    (k["agent_type"], k["repo_id"], k["capabilities"])) or {}
                     for k in orphans]  # an aggregate always has its one row
            first, needs = orphans[0], capability_list(orphans[0]["capabilities"])
            wanted = ([f"agent_type {first['agent_type']}"] if first["agent_type"] else []) + (
                [f"capabilities {', '.join(needs)}"] if needs else [])
            need = f" (e.g. '{stuck[0]['example']}' needs {' and '.join(wanted)})" if wanted else ""
            fix = ("create_agent registers one (claude-code, codex, gemini or command)" + (
                "; edit_agent capabilities=[...] gives an agent capabilities" if needs else "") + ".")
            warnings.append(f"{sum(r['n'] for r in stuck)} READY task(s) have no agent that can run them{need}. {fix}")
        ready = self.store.scalar("SELECT coalesce(sum(n), 0) FROM task_counts WHERE status = 'READY'")
        if ready and self.orchestrator_state() == "paused":
            warnings.append(f"The orchestrator is paused with {ready} READY task(s); "
                            "orchestrator_control action=resume starts them.")
        parked = [parked_line(row) for row in Parking(self.store).status()]
        room = room_warning(self.home) if self.home is not None else None
        return ([room] if room else []) + parked + warnings + self._held_warnings() + self._no_change_warnings()

    def _held_warnings(self) -> list[str]:
        """Every task that carries a reason and next step (EXPLAINED: held, or waiting for input), the newest first,
        capped."""
        # The newest few of each held status, each a short range of the (status, updated_at) index: one status
        # IN (...) would read every held task and sort them when the store has no statistics.
        # Each status is a literal (our own names, never input): one fixed query text per range, as planned.
        statuses = ordered(EXPLAINED)
        newest = " UNION ALL ".join(
            f"SELECT * FROM (SELECT id, title, status, reason, next_step, updated_at FROM tasks WHERE status = '{s}' "
            f"ORDER BY updated_at DESC, id DESC LIMIT {HELD_LINES}) AS {s.lower()}" for s in statuses)
        held = self.store.all(f"SELECT id, title, status, reason, next_step FROM ({newest}) AS held "
                              f"ORDER BY updated_at DESC, id DESC LIMIT {HELD_LINES}")
        lines = [held_line(t) for t in held]
        explained, params = in_clause(EXPLAINED)
        counts = {r["status"]: int(r["n"]) for r in self.store.all(
            f"SELECT status, sum(n) AS n FROM task_counts WHERE {explained} GROUP BY status", params)}
        shown = {s: sum(1 for t in held if t["status"] == s) for s in counts}
        rest = {s: n - shown[s] for s, n in counts.items() if n > shown[s]}
        if rest:
            more = ",".join(s for s in ("BLOCKED", "FAILED", "PAUSED", "WAITING_INPUT") if s in rest)
            lines.append(f"and {sum(rest.values())} more: list_tasks status={more}")
        return lines

    def _no_change_warnings(self) -> list[str]:
        """Tasks completed in the last 24 h whose last run changed no file in their repo."""
        since = (datetime.now(UTC) - timedelta(hours=24)).isoformat(timespec="milliseconds")
        rows = self.store.all(
            # The last day's results first (a small range of an index), never a scan of every completed task:
            # SQLite keeps the written order with CROSS JOIN; PostgreSQL's planner finds it from its statistics.
            "SELECT t.id, t.repo_id FROM task_results r " + self.store.ordered_join + " tasks t ON r.task_id = t.id "
            "WHERE t.status = 'COMPLETED' AND r.warning IS NOT NULL AND r.created_at >= ? "
            "AND r.attempt = (SELECT max(attempt) FROM task_results WHERE task_id = t.id) "
            "ORDER BY r.created_at DESC LIMIT ?", (since.replace("+00:00", "Z"), HELD_LINES + 1))
        lines = [f"Task {r['id']} completed with no change in repo {r['repo_id']}: read its log; "
                 "restart_task to run it again." if r["repo_id"] else
                 f"Task {r['id']} completed in its project's scratch folder, not in a git repo (the project has no "
                 "repo): nothing landed. For code work: add_repo, edit_task repo_id, restart_task."
                 for r in rows[:HELD_LINES]]
        if len(rows) > HELD_LINES:
            lines.append("and more tasks completed with no change: get_task_result shows each one's warning.")
        return lines

    def status(self) -> dict[str, Any]:
        by_status = {r["status"]: int(r["n"]) for r in self.store.all(  # trigger-kept counts: no table scan
            "SELECT status, sum(n) AS n FROM task_counts GROUP BY status HAVING sum(n) > 0")}
        claimed, params = in_clause(CLAIMED)
        in_progress = self.store.all(
            f"SELECT id, title, project_id, assigned_agent FROM tasks WHERE {claimed} ORDER BY updated_at LIMIT 50",
            params)
        ready = self.store.all("SELECT id, title, project_id FROM tasks WHERE status = 'READY' "
                               "ORDER BY priority, created_at LIMIT 50")
        agents, _ = self.agents.list(limit=500)
        return {
            "projects": int(self.store.scalar("SELECT count(*) FROM projects")),
            "agents": [{"id": a.id, "name": a.name, "agent_type": a.agent_type, "state": a.state,
                        "current_task": a.current_task} for a in agents],
            "tasks": {"total": sum(by_status.values()),
                      "by_status": {s: by_status.get(s, 0) for s in STATUS_NAMES if by_status.get(s)},
                      "in_progress": in_progress, "ready": ready},
            "orchestrator": {"state": self.orchestrator_state(), "running_tasks": self.running_tasks()},
            "warnings": self.warnings(),
            "merge_queue": self.merge_queue(),
            # Agent kinds given no task until a login check, a reset time or `agentqueue resume` (parking.py).
            "parked": Parking(self.store).status(),
            **({"daemons": self.daemons()} if self.store.shared else {}),
        }

    def merge_queue(self) -> list[dict[str, Any]]:
        """Per repo with something in its merge queue: the task landing (its checks running), the tasks waiting in
        the order they entered, and the tasks sent back to their agent with why (design.md "Merge queue")."""
        repos: dict[str, dict[str, Any]] = {}

        def repo(repo_id: str) -> dict[str, Any]:
            return repos.setdefault(repo_id, {"repo_id": repo_id, "landing": None, "waiting": [], "sent_back": []})

        queued = self.store.all(
            "SELECT t.id, t.title, t.repo_id, (SELECT max(e.id) FROM events e WHERE e.task_id = t.id AND "
            "e.event_type = 'merge_queue.entered') AS entered, (SELECT max(e.id) FROM events e WHERE e.task_id = t.id "
            "AND e.event_type = 'merge_queue.testing') AS testing FROM tasks t WHERE t.status = 'VERIFYING' "
            "AND t.repo_id IS NOT NULL ORDER BY t.updated_at LIMIT 200")
        for row in sorted((r for r in queued if r["entered"]), key=lambda r: r["entered"]):
            entry = {"id": row["id"], "title": row["title"]}
            if row["testing"] and row["testing"] > row["entered"]:
                repo(row["repo_id"])["landing"] = entry
            else:
                repo(row["repo_id"])["waiting"].append(entry)
        claimed, params = in_clause(CLAIMED)
        rows = self.store.all("SELECT id, title, repo_id, status, assigned_agent FROM tasks WHERE status = 'READY' "
                              "AND assigned_agent IS NOT NULL LIMIT 100")
        rows += self.store.all(f"SELECT id, title, repo_id, status, assigned_agent FROM tasks WHERE {claimed} "
                               "AND repo_id IS NOT NULL LIMIT 100", params)
        waits = send_backs.held_reruns(self.store) if rows else {}
        for row in rows:
            last = self.store.one(
                "SELECT event_type, payload, timestamp FROM events WHERE task_id = ? AND event_type IN "
                "('task.sent_back', 'merge_queue.entered') ORDER BY id DESC LIMIT 1", (row["id"],))
            if not last or last["event_type"] != "task.sent_back" or not row["repo_id"]:
                continue
            payload = last["payload"] if isinstance(last["payload"], dict) else json.loads(last["payload"] or "{}")
            repo(row["repo_id"])["sent_back"].append({
                "id": row["id"], "title": row["title"], "status": row["status"], "agent_id": row["assigned_agent"],
                "why": sent_back_why(payload) + (f"; its rerun waits for {', '.join(waits[row['id']])}'s (the same "
                                                 "files)" if row["id"] in waits else ""), "at": last["timestamp"]})
        return [repos[r] for r in sorted(repos)]

    def daemons(self) -> list[dict[str, Any]]:
        """The daemons sharing a team's queue: where each runs, its labels, its runs now, when it last beat."""
        claimed, params = in_clause(CLAIMED)
        running = {r["owner"]: r["n"] for r in self.store.all(
            f"SELECT owner, count(*) AS n FROM tasks WHERE {claimed} GROUP BY owner", params)}
        return [{"id": d["id"], "hostname": d["hostname"], "home": d["home"],
                 "labels": json.loads(d["labels"] or "[]"), "running": running.get(d["id"], 0),
                 "heartbeat_at": d["heartbeat_at"]}
                for d in self.store.all("SELECT * FROM daemons ORDER BY started_at, id")]
