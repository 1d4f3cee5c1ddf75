"""The scheduler's read model: what `scheduler.schedule` needs of the queue, read in the claim transaction.

Per project only the few best READY tasks an idle agent could take are read (never the whole READY set), so a
pass costs the same at 100 or 100,000 tasks. The pure scheduler (scheduler.py) decides; this module only reads.
"""

from __future__ import annotations

import json

from ..services import Services
from ..services.task_states import COUNTS_TOWARD_CONCURRENCY, in_clause
from ..services.routing import capability_list, covers_sql
from ..services.team import Team
from .scheduler import IdleAgent, ProjectState, QueueState, ReadyTask
from .workspaces import Workspaces


def read_queue_state(services: Services, team: Team, workspaces: Workspaces,
                     parked: frozenset[str] = frozenset(), waiting: frozenset[str] = frozenset()) -> QueueState:
    """What the scheduler needs, and no more (see the module's docstring); inside the caller's claim transaction
    the rows it reads to claim are locked (SKIP LOCKED on PostgreSQL). `parked`: agent kinds given no task (their
    login failed or their limit is used up: engine/parking.py); their tasks stay READY for when they resume.
    `waiting`: tasks sent back whose rerun waits for another's on the same files (services/send_backs.py)."""
    store = services.store
    lock = store.claim_lock
    paused = services.system.orchestrator_state() == "paused"
    if paused:
        return QueueState((), (), (), paused)
    # Agents this daemon may run: unlabelled ones, and those whose label it has.
    labels = team.labels
    held = sorted(parked)
    not_parked = f"AND agent_type NOT IN ({', '.join('?' for _ in held)}) " if held else ""
    agents = tuple(IdleAgent(a["id"], a["agent_type"], a["repo_id"],
                             tuple(sorted(json.loads(a["capabilities"] or "[]"))))  # sorted: one kind per set
                   for a in store.all(
                       "SELECT id, agent_type, repo_id, capabilities FROM agents WHERE state = 'IDLE' AND paused = 0 "
                       f"{not_parked}AND (label IS NULL OR label IN ({', '.join('?' for _ in labels) or 'NULL'})) "
                       "ORDER BY id LIMIT 500" + lock, (*held, *labels)))
    if not agents:
        return QueueState((), (), agents, paused)
    usage = services.usage.window_totals(24)
    rows = store.all("SELECT * FROM projects ORDER BY id" + lock)
    skipped = bool(lock) and len(rows) < (store.scalar("SELECT count(*) FROM projects") or 0)
    # Counted once the projects' rows are held: another daemon's claims in them have committed by now.
    counted, params = in_clause(COUNTS_TOWARD_CONCURRENCY)
    running = {r["project_id"]: int(r["n"]) for r in store.all(  # trigger-kept counts: no pass over tasks
        f"SELECT project_id, sum(n) AS n FROM task_counts WHERE {counted} GROUP BY project_id", params)}
    projects = tuple(ProjectState(p["id"], p["credit_weight"], p["max_concurrent_agents"], p["budget_limit"],
                                  p["status"] == "PAUSED", usage.get(p["id"], 0), running.get(p["id"], 0))
                     for p in rows)
    # Repos this daemon cannot work on (a linked folder on another machine): their tasks are left to the other
    # daemons. A daemon alone claims them anyway, and blocks them saying the repo is missing.
    absent = [r.id for r in services.repos.list() if not workspaces.has_repo(r)] \
        if team.shared and team.others_alive() else []
    not_here = f" AND (repo_id IS NULL OR repo_id NOT IN ({', '.join('?' for _ in absent)}))" if absent else ""
    held = sorted(waiting)
    if held:
        not_here += f" AND id NOT IN ({', '.join('?' for _ in held)})"
    tasks: dict[str, ReadyTask] = {}
    kinds = {(a.agent_type, a.repo_id, a.capabilities) for a in agents}
    # A task sent back to its agent (merge queue: READY with assigned_agent set) waits for that agent while it is
    # busy; it is read only when that agent is idle here, or gone or paused (then any agent may take it).
    idle = tuple(a.id for a in agents)
    pinned = (f" AND (assigned_agent IS NULL OR assigned_agent IN ({', '.join('?' for _ in idle)}) OR assigned_agent "
              "NOT IN (SELECT id FROM agents WHERE paused = 0))")
    # Team mode: it also waits for the daemon that holds its worktree, while that one lives.
    owned: tuple[str, ...] = ()
    if team.shared:
        pinned += (" AND (assigned_agent IS NULL OR owner IS NULL OR owner = ? OR owner NOT IN "
                   "(SELECT id FROM daemons WHERE lease_until >= ?))")
        owned = (team.id, store.clock())
    for project in projects:
        room = min(len(agents), project.max_concurrent_agents - project.running)
        if project.paused or room <= 0 or (project.budget_limit and project.tokens_24h >= project.budget_limit):
            continue
        for agent_type, repo_id, capabilities in kinds:  # each kind of idle agent sees its own best candidates
            # Only tasks whose capabilities this kind has all of: a task no idle agent can serve never fills the window.
            covered, needs = covers_sql(capabilities)
            for t in store.all(
                    "SELECT id, project_id, priority, created_at, agent_type, repo_id, assigned_agent, capabilities "
                    "FROM tasks WHERE project_id = ? AND status = 'READY' AND (agent_type IS NULL OR agent_type = ?) "
                    f"AND (? IS NULL OR repo_id = ?) AND {covered}{not_here}{pinned} "
                    "ORDER BY priority, created_at, id LIMIT ?"
                    + lock, (project.id, agent_type, repo_id, repo_id, *needs, *absent, *held, *idle, *owned, room)):
                tasks[t["id"]] = ReadyTask(t["id"], t["project_id"], t["priority"], t["created_at"],
                                           t["agent_type"], t["repo_id"],
                                           t["assigned_agent"] if t["assigned_agent"] in idle else None,
                                           tuple(capability_list(t["capabilities"])))
    runs = store.one("SELECT avg(total) AS avg FROM (SELECT total FROM token_ledger WHERE task_id IS NOT NULL "
                     "ORDER BY id DESC LIMIT 200) AS recent") or {}  # the recent runs' size, without reading every row
    return QueueState(projects, tuple(tasks.values()), agents, paused, int(runs.get("avg") or 10_000) or 10_000,
                      skipped)
