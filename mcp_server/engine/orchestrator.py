"""The engine loop: recover, resume paused tasks, schedule, claim, run agents, land their work.

One engine per AGENTQUEUE_HOME (the daemon's lock decides). Runs are tasks in the engine's task
group; each ends in exactly one state change, and a run that dies with the daemon is recovered on
the next start (WIP committed on its branch, the orphan process group killed, the task requeued).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import json
import logging
import os
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from .. import paths
from ..services import Services, gitops
from ..services.errors import ServiceError
from ..services.agents import find_cli, release_agents
from ..services.policy_rules import tool_action
from ..settings import Settings
from ..services.lifecycle import Lifecycle
from ..services.task_states import COUNTS_TOWARD_CONCURRENCY, in_clause
from ..services.tasks import AmbiguousRepoError
from ..services.vcs import find_gh
from ..store.models import Agent, Task
from . import protected
from .adapters import BUILDERS, PARSERS
from .adapters.base import AgentConfig, RunResult, RunSpec
from .hook_runner import HookRunner
from .agent_mcp import TAKES_MCP_CONFIG, agentqueue_server
from .permissions import PermissionChannel
from .prompting import context_for, task_prompt
from .runner import RunHandle, run_agent, signal_group
from .scheduler import IdleAgent, ProjectState, QueueState, ReadyTask, schedule
from .watchdog import WatchdogLimits
from .workspaces import Tips, Workspace, Workspaces

log = logging.getLogger("agentqueue.engine")


# Events after which a scheduling pass may find something new to start.
WAKING_EVENTS = frozenset({"task.created", "task.ready", "task.restarted", "task.updated", "task.status_overridden",
                           "task.changes_requested", "orchestrator.resumed", "project.created", "project.resumed",
                           "project.updated", "agent.created", "agent.updated", "agent.resumed"})
RESCAN_SECONDS = 30.0  # a pass even when nothing woke the engine (a rolling budget window frees a project)


@dataclass
class EngineConfig:
    """Tunables (config.toml [engine] and AGENTQUEUE_* variables; see settings.py)."""

    poll_seconds: float = 1.0
    rate_limit_backoff: float = 60
    rate_limit_max_backoff: float = 900
    max_turns: int = 50
    pr_poll_seconds: float = 60
    limits: WatchdogLimits = field(default_factory=WatchdogLimits)

    @classmethod
    def from_settings(cls, settings: Settings) -> EngineConfig:
        e = settings.engine
        return cls(poll_seconds=e["poll_seconds"], rate_limit_backoff=e["rate_limit_backoff"],
                   rate_limit_max_backoff=e["rate_limit_max_backoff"], max_turns=int(e["max_turns"]),
                   pr_poll_seconds=e["pr_poll_seconds"],
                   limits=WatchdogLimits(stall_seconds=e["stall_seconds"], timeout_seconds=e["task_timeout"]))


# Reads of a finished run's branch that run at once (Engine._read_branch): a few git processes per landing.
_READS = concurrent.futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix="agentqueue-git")


@dataclass
class _Reads:
    """What `_read_branch` read of a finished run's branch; rules and tips are None when they must be read again."""

    listed: list[dict[str, str]] = field(default_factory=list)
    touched: list[str] | None = None
    rules: list[protected.Rule] | None = None
    tips: Tips | None = None


# Agent CLIs that read project settings from the worktree and have no switch to skip them.
MASKED_AGENTS = ("codex", "gemini")


class Engine:
    def __init__(self, services: Services, home: Path, flush: Callable[[], Awaitable[None]] | None = None,
                 config: EngineConfig | None = None, on_log: Callable[[str], None] | None = None) -> None:
        self.services = services
        self.on_log = on_log  # told the task id whenever its log grows (resource notifications)
        self.home = home
        self.flush = flush
        self.config = config or EngineConfig.from_settings(services.settings)
        self.team = services.team
        self.lifecycle = Lifecycle(services.store, services.tasks, services.usage, owner=self.team.id)
        # A team's daemons each keep their own checkouts, and land through the repos' remotes.
        self.workspaces = Workspaces(home / "worktrees", home / "checkouts" if self.team.shared else None)
        self.running: dict[str, RunHandle] = {}
        self.hooks = HookRunner(services, home)
        self.shutting_down = False
        self._poked = True
        self._last_pr_poll = 0.0
        self._last_pass = 0.0
        services.engine_hooks.connect(stop_run=self.stop_task, land_approved=self.land_approved, hook_runner=self.hooks)
        services.store.on_commit(self._on_commit)

    # -- hooks used by the services ----------------------------------------------------------------
    def stop_task(self, task_id: str) -> bool:
        handle = self.running.get(task_id)
        return handle.kill("killed") if handle else False

    def run_of_pid(self, pid: int) -> tuple[str, str | None] | None:
        """(actor, task_id) of the run whose process is `pid`: `agent:<id>` and its task, or `hook:<id>` and None.

        The daemon asks this about a socket peer and its ancestors, so a task's agent is known by the
        process the engine started, never by what the agent says about itself.
        """
        for task_id, handle in list(self.running.items()):
            if handle.pid == pid:
                agent = self.services.store.scalar("SELECT assigned_agent FROM tasks WHERE id = ?", (task_id,))
                return f"agent:{agent or 'unknown'}", task_id
        for hook_id, handle in list(self.hooks.llm_runs.items()):
            if handle.pid == pid:
                return f"hook:{hook_id}", None
        return None

    def land_approved(self, task: Task) -> None:
        """approve_task: merge the kept branch now (raises on conflict); with a PR, GitHub merges it."""
        if not task.repo_id or not task.branch:
            return
        if task.pr_url:
            self._drop_worktree(task)
            return
        repo = self.services.repos.get(task.repo_id)
        workspace = Workspace(self.workspaces.path_for(repo.id, task.id), task.branch, repo)
        if not workspace.path.exists():
            workspace = self.workspaces.prepare(repo, task.id, task.title, task.branch)
        landing = self.workspaces.land(workspace, via_remote=self.team.shared)
        if not landing.merged:
            raise ServiceError(f"Approving '{task.id}' failed: {landing.message} The task stays AWAITING_APPROVAL.")
        self.workspaces.remove(workspace)
        with self.services.store.transaction() as db:
            db["tasks"].update(task.id, {"base_sha": landing.base_sha, "landed_sha": landing.sha})

    def _drop_worktree(self, task: Task) -> None:
        """The worktree of work that now lives in a PR (the branch stays, it is the PR's head)."""
        if task.repo_id:
            repo = self.services.repos.get(task.repo_id)
            workspace = Workspace(self.workspaces.path_for(repo.id, task.id), task.branch, repo)
            if workspace.path.exists():
                self.workspaces.remove(workspace, delete_branch=False)

    def poll_pull_requests(self) -> list[tuple[str, str]]:
        """AWAITING_APPROVAL tasks with a PR: merged on GitHub -> COMPLETED, closed -> BLOCKED."""
        gh = find_gh(self.services.settings)
        changed: list[tuple[str, str]] = []
        if gh is None:
            return changed
        for row in self.services.store.all(
                "SELECT id, repo_id FROM tasks WHERE status = 'AWAITING_APPROVAL' AND pr_url IS NOT NULL"):
            task = self.services.tasks.get(row["id"])
            try:
                cwd = self.workspaces.checkout_of(self.services.repos.get(task.repo_id)) if task.repo_id else None
                done = subprocess.run([gh, "pr", "view", task.pr_url, "--json", "state,mergedAt"], cwd=cwd,
                                      capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
                state = json.loads(done.stdout or "{}")
            except (OSError, ValueError, subprocess.TimeoutExpired, ServiceError) as error:
                log.info("could not check the PR of %s: %s", task.id, error)
                continue
            if state.get("state") == "MERGED" or state.get("mergedAt"):
                self.lifecycle.pr_settled(task.id, merged=True)
                self._drop_worktree(task)
                changed.append((task.id, "COMPLETED"))
            elif state.get("state") == "CLOSED":
                self.lifecycle.pr_settled(task.id, merged=False)
                changed.append((task.id, "BLOCKED"))
        return changed

    def _on_commit(self, events: list[dict[str, Any]]) -> None:
        if any(e["event_type"] in WAKING_EVENTS for e in events):
            self._poked = True

    # -- the loop ------------------------------------------------------------------------------
    async def run(self) -> None:
        """Join the daemons on the queue (a lease kept fresh while the engine runs, a daemon's or a standalone
        server's alike), recover, then schedule and run until shutdown; leave at the end."""
        await anyio.to_thread.run_sync(self.team.join)
        try:
            async with anyio.create_task_group() as lease:
                lease.start_soon(self._keep_lease)
                await self._run()
                lease.cancel_scope.cancel()  # only once every run has settled: they are this engine's to the end
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self.team.leave)

    async def _keep_lease(self) -> None:
        every = self.team.lease_seconds / 3  # two beats may be missed before the lease runs out
        while True:
            await anyio.sleep(every)
            try:
                await anyio.to_thread.run_sync(self._beat)
            except Exception:  # the database is unreachable for a moment: the next beat tries again
                log.exception("heartbeat failed")

    def _beat(self) -> None:
        if not self.team.beat():
            log.warning("this daemon's lease ran out and other daemons took over its runs; rejoining the team")
            self.lease_lost()
            self.team.join()
        if self.team.shared:
            self.take_over()

    async def _run(self) -> None:
        await anyio.to_thread.run_sync(self.recover)
        async with anyio.create_task_group() as tg:
            self._tg = tg
            hooks_scope = anyio.CancelScope()

            async def hooks_loop() -> None:
                with hooks_scope:
                    await self.hooks.run_forever()

            tg.start_soon(hooks_loop)
            while not self.shutting_down:
                # Schedule only when something that can start a run happened (or, as a safety net, now
                # and then: a budget window that slid); otherwise a tick is the few cheap periodic checks.
                full = self._poked or time.monotonic() - self._last_pass >= RESCAN_SECONDS
                self._poked = False
                try:
                    for task_id, agent_id in await anyio.to_thread.run_sync(self.tick, full):
                        tg.start_soon(self.execute, task_id, agent_id)
                except Exception:
                    log.exception("engine tick failed")
                if self.flush:
                    await self.flush()
                waited = 0.0
                while waited < self.config.poll_seconds and not self._poked and not self.shutting_down:
                    await anyio.sleep(0.02)
                    waited += 0.02
            hooks_scope.cancel()  # the hook runner goes with the engine; runs in flight finish first

    def tick(self, full: bool = True) -> list[tuple[str, str]]:
        """Resume due PAUSED tasks, check PRs (every 60 s), and with `full` schedule and claim; returns the
        runs to start."""
        self.lifecycle.resume_due()
        if time.monotonic() - self._last_pr_poll >= self.config.pr_poll_seconds:
            self._last_pr_poll = time.monotonic()
            self.poll_pull_requests()
        if not full:
            return []
        self._last_pass = time.monotonic()
        claims = []
        # One transaction that runs beside other daemons' claim passes: the rows it reads to claim are locked
        # (SKIP LOCKED on PostgreSQL), so two daemons never pick the same agent, task or project at once.
        with self.services.store.transaction(concurrent=True):
            state = self.queue_state()
            for assignment in schedule(state):
                if self.lifecycle.claim(assignment.task_id, assignment.agent_id):
                    claims.append((assignment.task_id, assignment.agent_id))
        if state.skipped:
            self._poked = True  # another daemon was scheduling some of it: look again next tick
        return claims

    def queue_state(self) -> QueueState:
        """What the scheduler needs, and no more: per project only the few best READY tasks that an idle
        agent could take (never the whole READY set), so a pass costs the same at 100 or 100,000 tasks."""
        store = self.services.store
        lock = store.claim_lock
        paused = self.services.system.orchestrator_state() == "paused"
        if paused:
            return QueueState((), (), (), paused)
        # Agents this daemon may run: unlabelled ones, and those whose label it has.
        labels = self.team.labels
        agents = tuple(IdleAgent(a["id"], a["agent_type"], a["repo_id"], tuple(json.loads(a["capabilities"] or "[]")))
                       for a in store.all(
                           "SELECT id, agent_type, repo_id, capabilities FROM agents WHERE state = 'IDLE' AND paused = 0 "
                           f"AND (label IS NULL OR label IN ({', '.join('?' for _ in labels) or 'NULL'})) "
                           "ORDER BY id LIMIT 500" + lock, tuple(labels)))
        if not agents:
            return QueueState((), (), agents, paused)
        usage = self.services.usage.window_totals(24)
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
        absent = [r.id for r in self.services.repos.list() if not self.workspaces.has_repo(r)] \
            if self.team.shared and self.team.others_alive() else []
        not_here = f" AND (repo_id IS NULL OR repo_id NOT IN ({', '.join('?' for _ in absent)}))" if absent else ""
        tasks: dict[str, ReadyTask] = {}
        kinds = {(a.agent_type, a.repo_id) for a in agents}
        for project in projects:
            room = min(len(agents), project.max_concurrent_agents - project.running)
            if project.paused or room <= 0 or (project.budget_limit and project.tokens_24h >= project.budget_limit):
                continue
            for agent_type, repo_id in kinds:  # each kind of idle agent sees its own best candidates
                for t in store.all(
                        "SELECT id, project_id, priority, created_at, agent_type, repo_id FROM tasks "
                        "WHERE project_id = ? AND status = 'READY' AND (agent_type IS NULL OR agent_type = ?) "
                        f"AND (? IS NULL OR repo_id = ?){not_here} ORDER BY priority, created_at, id LIMIT ?" + lock,
                        (project.id, agent_type, repo_id, repo_id, *absent, room)):
                    tasks[t["id"]] = ReadyTask(t["id"], t["project_id"], t["priority"], t["created_at"],
                                               t["agent_type"], t["repo_id"])
        runs = store.one("SELECT avg(total) AS avg FROM (SELECT total FROM token_ledger WHERE task_id IS NOT NULL "
                         "ORDER BY id DESC LIMIT 200) AS recent") or {}  # the recent runs' size, without reading every row
        return QueueState(projects, tuple(tasks.values()), agents, paused, int(runs.get("avg") or 10_000) or 10_000,
                          skipped)

    # -- one run ---------------------------------------------------------------------------------
    async def execute(self, task_id: str, agent_id: str) -> None:
        handle = RunHandle()
        self.running[task_id] = handle
        try:
            await self._execute(task_id, agent_id, handle)
        except Exception as error:
            log.exception("run of %s failed inside the engine", task_id)
            try:
                self.lifecycle.failed(task_id, "crashed", f"AgentQueue engine error: {error}")
            except Exception:
                log.exception("could not record the failure of %s", task_id)
        finally:
            # Free the agent before leaving `running`: shutdown waits on `running`, and must not
            # return while an agent is still marked BUSY. A question the run left open is moot now.
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self._close_requests, task_id)
                await anyio.to_thread.run_sync(self.lifecycle.free_agent, agent_id, task_id)
            self.running.pop(task_id, None)
            self._poked = True
            if self.flush:
                await self.flush()

    async def _execute(self, task_id: str, agent_id: str, handle: RunHandle) -> None:
        svc = self.services
        agent = svc.agents.get(agent_id)
        started_in = await anyio.to_thread.run_sync(self._start, task_id, agent)
        if started_in is None:
            return  # held (BLOCKED) before it could start
        task, workspace = started_in
        log.info("run of %s started: agent %s (%s) in %s%s", task_id, agent.id, agent.agent_type, workspace.path,
                 f" on branch {workspace.branch}" if workspace.branch else "")
        if self.flush:
            await self.flush()
        tools = agent.agent_type in TAKES_MCP_CONFIG
        mcp = agentqueue_server(self.home, ("agent",)) if tools else None
        planted = {} if workspace.repo is None or workspace.fresh else \
            await anyio.to_thread.run_sync(self._planted, task.id, agent.agent_type, workspace)
        spec = BUILDERS[agent.agent_type](self._agent_config(agent, task.project_id, project_settings=planted == {}),
                                          task_prompt(task, svc.feedback.comments(task.id)),
                                          context_for(svc, task, workspace, agent_tools=tools), mcp)
        started = time.monotonic()

        def remember_pid() -> None:
            self.lifecycle.set_pid(agent_id, handle.pid)

        log_path = self.log_path(task_id)
        on_line = (lambda _line: self.on_log(task_id)) if self.on_log else None
        channel = PermissionChannel(svc, task.project_id, task.id, agent.id, workspace.path,
                                    lambda line: self._log_line(task_id, line))
        env = svc.settings.agent_environment()
        # Claude Code skips planted settings itself (--setting-sources user) and may still edit them; a CLI with no
        # such switch sees the default branch's files over the planted ones, read-only, for this run.
        masks = planted or {} if agent.agent_type in MASKED_AGENTS else {}
        with self._contained(task, agent, workspace, spec, env, masks) as (spec, env):
            runner = run_agent(spec, workspace.path, PARSERS[agent.agent_type](), handle, log_path, self.config.limits,
                               on_line, env=env, channel=channel)
            async with anyio.create_task_group() as tg:
                async def note_pid() -> None:
                    while handle.pid is None:
                        await anyio.sleep(0.01)
                    await anyio.to_thread.run_sync(remember_pid)
                tg.start_soon(note_pid)
                result = await runner
                tg.cancel_scope.cancel()
        duration = time.monotonic() - started
        log.info("run of %s ended: %s%s after %.1f s, %d tokens, $%.4f", task_id, result.status,
                 f" ({result.error_type})" if result.error_type else "", duration,
                 int(result.tokens.get("total", 0)), result.cost_usd or 0)
        if self.shutting_down and handle.stop_reason == "killed":
            await anyio.to_thread.run_sync(self._requeue_after_shutdown, task, workspace)
            return
        await anyio.to_thread.run_sync(self._finish, task, workspace, agent, result, duration)

    def _start(self, task_id: str, agent: Agent) -> tuple[Task, Workspace] | None:
        """Before a run, in one worker thread: the command agent's policy, the sandbox, the workspace, and the task
        IN_PROGRESS; (the task as it now is, its workspace), or None when the task was BLOCKED instead."""
        svc = self.services
        task = svc.tasks.get(task_id)
        if agent.agent_type == "command":
            # What a command agent runs was approved when it was registered; a deny added since still wins.
            verdict = svc.policies.decide(tool_action("run_command", agent.command), task.project_id)
            if verdict.decision == "deny":
                details = {"error": verdict.refusal(f"Agent {agent.id}'s command `{agent.command}`")}
                self.lifecycle.blocked(task_id, "policy_denied", details=details)
                return None
        refused = svc.sandbox.blocked(task.project_id)
        if refused:  # fail closed: no sandbox, no run
            self.lifecycle.blocked(task_id, "sandbox_unavailable", details={"error": refused})
            return None
        try:
            workspace = self._prepare(task)
        except ServiceError as error:  # e.g. the repo's checkout is gone: the task must not stay ASSIGNED
            self.lifecycle.blocked(task_id, "workspace_failed", details={"error": str(error)})
            return None
        if workspace is None:
            return None
        task = svc.tasks.get(task_id)  # with the repo it was resolved to, if it named none
        self.lifecycle.started(task_id, workspace.branch)
        return task, workspace

    @contextlib.contextmanager
    def _contained(self, task: Task, agent: Agent, workspace: Workspace, spec: RunSpec, env: dict[str, str],
                   planted: dict[str, bytes | None]) -> Iterator[tuple[RunSpec, dict[str, str]]]:
        """The run's argv inside the OS sandbox (its rules stated in the task log), with the network gate open
        while it runs; unsandboxed only when a person set [sandbox] required = false and none can start.
        Settings an unmerged earlier run planted are shown to it as the default branch has them."""
        policy = self.services.policies.effective(task.project_id)
        with self.services.sandbox.around(
                spec.argv, env, workspace.path, task.project_id, preset=policy.preset.name, actor=f"agent:{agent.id}",
                task_id=task.id, agent_type=agent.agent_type, branch=workspace.branch,
                agent_socket=agent.agent_type in TAKES_MCP_CONFIG,
                masks={workspace.path / rel: content for rel, content in planted.items()},
                log_line=lambda line: self._log_line(task.id, line)) as (argv, inner_env):
            yield dataclasses.replace(spec, argv=argv, shown=spec.argv[:3]), inner_env

    def _prepare(self, task: Task) -> Workspace | None:
        """The task's worktree in its repo, or the project workspace when the project has no repo.

        A task created before its project had a repo is resolved now, like create_task does (default
        repo, else the only one); when that is ambiguous the task is BLOCKED and None returned."""
        repo_id = task.repo_id
        if repo_id is None:
            try:
                repo_id = self.services.tasks.resolve_repo(task.project_id)
            except AmbiguousRepoError as error:
                self.lifecycle.blocked(task.id, "ambiguous_repo",
                                       details={"project_id": error.project_id, "repos": error.repos})
                return None
            if repo_id:
                self.lifecycle.set_repo(task.id, repo_id)
        if repo_id:
            repo = self.services.repos.get(repo_id)
            return self.workspaces.prepare(repo, task.id, task.title, task.branch)
        project = self.services.projects.get(task.project_id)
        Path(project.workspace).mkdir(parents=True, exist_ok=True)
        return Workspace(Path(project.workspace))

    def _agent_config(self, agent: Agent, project_id: str, project_settings: bool = True) -> AgentConfig:
        binary = find_cli(agent.agent_type, self.services.settings) if agent.agent_type != "command" else None
        policy = self.services.policies.effective(project_id)
        deny = [rule.text for rule, _ in policy.rules["deny"] if not rule.tool.startswith("tool:")]
        return AgentConfig(agent.agent_type, binary=binary, model=agent.model, command=agent.command,
                           max_turns=self.config.max_turns, preset=policy.preset.name, deny_rules=deny,
                           sandboxed=self.services.sandbox.unavailable() is None,
                           project_settings=project_settings)

    def _planted(self, task_id: str, agent_type: str, workspace: Workspace) -> dict[str, bytes | None] | None:
        """Run-configuring files in the worktree that differ from the default branch (a rerun on a kept branch),
        each with the default's content; None when they could not be compared (treated as planted)."""
        if workspace.repo is None or workspace.fresh:
            return {}  # a worktree just checked out from the default branch holds nothing else
        try:
            planted = protected.planted_settings(workspace.path, workspace.repo.default_branch)
        except (ServiceError, OSError) as error:
            self._log_line(task_id, f"[protected] could not compare the run's settings with the default branch "
                                    f"({error}); project settings are not loaded for this run.")
            return None
        if planted:
            self._log_line(task_id, protected.planted_note(planted, agent_type))
        return planted

    def _log_line(self, task_id: str, line: str) -> None:
        """A line of the engine's own in a task's log (the run's log file is open in the runner)."""
        with self.log_path(task_id).open("a", encoding="utf-8") as task_log:
            task_log.write(line + "\n")
        if self.on_log:
            self.on_log(task_id)

    def log_path(self, task_id: str) -> Path:
        """The task's agent transcript, created private (0600 in a 0700 folder) before anything writes it."""
        path = paths.task_log(self.home, task_id)
        paths.private_dir(path.parent)
        return paths.private_file(path)

    def _finish(self, task: Task, workspace: Workspace, agent: Agent, result: RunResult, duration: float) -> None:
        if not self.lifecycle.owns(task.id):
            # Another daemon took the run over (this one's lease ran out): its rerun is the one that lands.
            log.warning("run of %s ended after another daemon took it over: its result is dropped", task.id)
            return
        files: list[str] = []
        touched: list[str] | None = None  # every path the branch changes (both sides of a rename), read once
        counted = False  # whether `files` is known (a git error leaves it unknown: no no-change warning then)
        read = _Reads()
        if workspace.repo is not None:
            try:
                read = self._read_branch(task, workspace)
                files = [f["path"] for f in read.listed]
                touched = read.touched
                counted = True
            except ServiceError as error:
                log.warning("could not commit leftovers of %s: %s", task.id, error)
        verified = False  # a verify command ran in the worktree after its leftovers were committed
        if result.status == "completed":
            failure = self._verify(task, workspace)
            verified = failure is None and bool(self.services.projects.get(task.project_id).verify_command)
            if failure:
                result.status, result.error_type, result.error_message = "failed", "verify_failed", failure
        if verified:
            read = _Reads()  # the verify command ran in the worktree: its rules and tips are read again
        warning = None
        if result.status == "completed" and counted and not files and workspace.repo is not None:
            warning = f"The agent finished without changing any file in repo '{workspace.repo.id}'."
            log.warning("task %s: %s", task.id, warning)
        self.lifecycle.record_attempt(task.id, agent.id, result, duration, files, warning)
        if result.status != "completed":
            pause = None
            if result.error_type in ("rate_limit", "quota"):
                streak = self.lifecycle.consecutive_pauses(task.id)
                base = self.config.rate_limit_backoff * (5 if result.error_type == "quota" else 1)
                pause = min(base * 2 ** max(streak - 1, 0), self.config.rate_limit_max_backoff)
            self.lifecycle.failed(task.id, result.error_type, result.error_message, pause, agent.agent_type)
            return
        if not self.lifecycle.running(task.id):
            return  # stopped meanwhile: stop_task already decided
        if workspace.repo is None:
            self.lifecycle.succeeded(task.id, awaiting_approval=task.requires_approval)
            if not task.requires_approval:
                self._remember(task, result)
            return
        # Changes to protected paths (agent settings, git hooks, CI...) never land unreviewed (engine/protected.py).
        hold = protected.landing_hold(workspace.path, workspace.repo.default_branch, workspace.branch or "HEAD",
                                      touched, read.rules)
        if task.requires_approval or hold:
            pr_url = self._open_pr(task, workspace)
            if hold:
                self._log_line(task.id, f"[protected] {hold.reason()}")
                log.warning("task %s waits for approval: %s", task.id, hold.reason())
            self.lifecycle.succeeded(task.id, awaiting_approval=True, pr_url=pr_url,
                                     held=(hold.reason(), hold.next_step(task.id, pr_url)) if hold else None)
            return
        repo = workspace.repo
        where = {"repo_id": repo.id, "branch": workspace.branch, "default_branch": repo.default_branch,
                 "checkout": str(self.workspaces.checkout_of(repo))}
        if not self.lifecycle.running(task.id):
            return  # stopped, or taken over by another daemon, while it verified
        try:
            landing = self.workspaces.land(workspace, via_remote=self.team.shared, files=files if counted else None,
                                           check_clean=verified or not counted, tips=read.tips)
        except ServiceError as error:
            self.lifecycle.blocked(task.id, "merge_failed", {**where, "error": str(error)})
            return
        if landing.merged:
            self.lifecycle.succeeded(task.id, awaiting_approval=False, landed=(landing.base_sha, landing.sha),
                                     details={**where, "files": len(landing.files_changed)})
            # Cleanup once the task is done (its dependents may start): the run ends, and frees its agent, after it.
            self.workspaces.remove(workspace, landed_tip=landing.tip)
            self._remember(task, result)
        elif landing.conflicts:
            self.lifecycle.blocked(task.id, "merge_conflict", {**where, "conflicts": landing.conflicts,
                                                               "message": landing.message})
        else:  # git refused to move the default branch, e.g. over the user's uncommitted edits
            self.lifecycle.blocked(task.id, "merge_failed", {**where, "dirty": landing.dirty,
                                                             "error": landing.message})

    def _read_branch(self, task: Task, workspace: Workspace) -> _Reads:
        """The finished run's leftovers committed, and what its landing reads of the branch: the changes, the
        protected-path rules and both tips, all read at once beside the leftovers' `status` (they only read
        commits, the index and config); read again, one after another, when that status found leftovers."""
        lands_here = not task.requires_approval and not self.team.shared  # else no tips are needed (a PR, origin)
        futures = (_READS.submit(self.workspaces.changes, workspace),
                   _READS.submit(protected.landing_rules, workspace.path),
                   _READS.submit(self.workspaces.tips, workspace) if lands_here else None)
        try:
            committed = self.workspaces.commit_leftovers(workspace, f"{task.title}\n\nAgentQueue task {task.id}")
        finally:
            concurrent.futures.wait([f for f in futures if f])  # nothing runs on in the background past here
        if committed is None:
            listed, touched = futures[0].result()
        else:
            listed, touched = self.workspaces.changes(workspace)
        reads = _Reads(listed, touched)
        if committed is None and not futures[1].exception():
            reads.rules = futures[1].result()
        if committed is None and futures[2] and not futures[2].exception():
            reads.tips = futures[2].result()
        return reads  # rules or tips unread (leftovers, a git error): the landing reads them itself, as before

    def _remember(self, task: Task, result: RunResult) -> None:
        """A line in today's project memory for each completed task."""
        summary = (result.summary or "").strip().splitlines()
        line = f"- {time.strftime('%H:%M')} task {task.id} \"{task.title}\" completed" + (
            f": {summary[0][:200]}" if summary else "")
        try:
            self.services.memory.append_today(task.project_id, line)
        except (OSError, ServiceError) as error:
            log.warning("could not write memory for %s: %s", task.id, error)

    def _verify(self, task: Task, workspace: Workspace) -> str | None:
        """The project's verify command on the agent's work (VERIFYING); returns why it failed, if it did."""
        command = self.services.projects.get(task.project_id).verify_command
        if not command or not self.lifecycle.running(task.id):
            return None
        self.lifecycle.verifying(task.id)
        timeout = int(min(600, self.config.limits.timeout_seconds))
        try:
            outcome = self.services.files.run(command, workspace.path, timeout, actor="verify", task_id=task.id)
        except ServiceError as error:
            return f"verify command could not run: {error}"
        with self.log_path(task.id).open("a", encoding="utf-8") as log_file:
            log_file.write(f"[verify] $ {command} -> {outcome.returncode}\n{outcome.stdout[-4000:]}{outcome.stderr[-4000:]}\n")
        if outcome.returncode == 0:
            return None
        return (f"verify command `{command}` " + ("timed out" if outcome.timed_out else f"exited {outcome.returncode}")
                + f": {(outcome.stderr or outcome.stdout).strip()[-500:]}")

    def _open_pr(self, task: Task, workspace: Workspace) -> str | None:
        """A PR when the repo has a remote and gh works; otherwise approve_task will merge."""
        repo = workspace.repo
        assert repo is not None and workspace.branch is not None
        if task.pr_url:  # a rerun after request_changes: pushing its branch updates the PR under review
            try:
                gitops.Checkout(self.workspaces.checkout_of(repo)).push(workspace.branch)
                return task.pr_url
            except ServiceError as error:
                log.info("could not update the PR of %s (%s); approve_task will merge it", task.id, error)
                return None
        try:
            return self.services.vcs.create_pr(repo, task.title, f"AgentQueue task `{task.id}`.\n\n"
                                               f"{task.description[:2000]}", workspace.branch, repo.default_branch,
                                               task_id=task.id, checkout_path=self.workspaces.checkout_of(repo))
        except ServiceError as error:
            log.info("no PR for %s (%s); approve_task will merge it", task.id, error)
            return None

    def _requeue_after_shutdown(self, task: Task, workspace: Workspace) -> None:
        self._save_wip(workspace, task.id)
        self.lifecycle.requeue(task.id, "shutdown", count_retry=False)

    def _save_wip(self, workspace: Workspace, task_id: str) -> None:
        if workspace.repo is not None and workspace.path.exists():
            try:
                self.workspaces.commit_leftovers(workspace, f"WIP: interrupted run of AgentQueue task {task_id}")
                if self.team.shared:  # the next run may be another daemon's: it continues from the remote's copy
                    self.workspaces.publish_branch(workspace)
            except ServiceError as error:
                log.warning("could not save WIP of %s: %s", task_id, error)

    def _close_requests(self, task_id: str) -> None:
        for request in self.services.requests.list("pending", task_id=task_id):
            self.services.requests.expire(request.id, "run ended")

    # -- start and stop ----------------------------------------------------------------------------
    def recover(self) -> list[str]:
        """At start: the runs this home's previous daemon left (kill orphans, keep their work, requeue them)."""
        if not self.team.shared:  # their runs died with the last daemon, and no other daemon asks anything
            for request_id in self.services.requests.expire_orphans():
                log.info("permission request %s expired: its run ended with the daemon", request_id)
        recovered = self.take_over(at_start=True)
        if not self.team.shared:
            with self.services.store.transaction():
                release_agents(self.services.store)
        return recovered

    def take_over(self, at_start: bool = False) -> list[str]:
        """The runs of daemons found dead (services/team.py): stop what is left of them on this machine, save their
        work on the task branch (published to the remote for a team), free their agents, and requeue each task."""
        recovered = []
        for dead in self.team.take_over(at_start):
            if dead.id:
                log.warning("daemon %s (%s, %s) stopped renewing its lease: taking over its runs %s", dead.id,
                            dead.hostname, dead.home, ", ".join(dead.tasks) or "(none)")
            for task_id in dead.tasks:
                row = self.services.store.one("SELECT * FROM tasks WHERE id = ?", (task_id,))
                if row is None:
                    continue
                if dead.here:
                    self._stop_leftover(row, Path(dead.home))
                for request in self.services.requests.list("pending", task_id=task_id):
                    self.services.requests.expire(request.id, "run ended with its daemon")
                with self.services.store.transaction():
                    release_agents(self.services.store, task_id=task_id)
                    status = self.lifecycle.requeue(task_id, "recovered", count_retry=True)
                log.info("recovered task %s -> %s", task_id, status)
                recovered.append(task_id)
        return recovered

    def _stop_leftover(self, row: dict[str, Any], home: Path) -> None:
        """A dead daemon's agent process on this machine is killed, and the work in its worktree kept."""
        agent = self.services.store.one("SELECT pid FROM agents WHERE current_task = ?", (row["id"],))
        workspace = self._workspace_of(row, home)
        if agent and agent["pid"]:
            kill_orphan(agent["pid"], workspace.path)
        self._save_wip(workspace, row["id"])

    def _workspace_of(self, row: dict[str, Any], home: Path | None = None) -> Workspace:
        if row["repo_id"]:
            try:
                repo = self.services.repos.get(row["repo_id"])
                where = Workspaces(home / "worktrees") if home else self.workspaces  # another home's worktrees
                return Workspace(where.path_for(repo.id, row["id"]), row["branch"], repo)
            except ServiceError:
                pass
        project = self.services.projects.get(row["project_id"])
        return Workspace(Path(project.workspace))

    def lease_lost(self) -> None:
        """Other daemons found this one dead (its lease ran out unrenewed) and took its runs: stop them here;
        they record nothing, the task is theirs now."""
        for task_id, handle in list(self.running.items()):
            if not self.lifecycle.owns(task_id):
                log.warning("lease lost: stopping the run of %s here (another daemon took it over)", task_id)
                handle.kill("lease_lost")

    async def shutdown(self, grace: float = 15.0) -> None:
        """Stop every run (their tasks go back to READY with WIP saved) and wait for them to settle."""
        self.shutting_down = True
        for handle in list(self.running.values()):
            handle.kill("killed")
        with anyio.move_on_after(grace):
            while self.running:
                await anyio.sleep(0.05)


def kill_orphan(pid: int, cwd: Path) -> bool:
    """Kill a dead daemon's agent process group, if that pid still runs in the task's directory."""
    try:
        actual = Path(os.readlink(f"/proc/{pid}/cwd")).resolve()
    except OSError:
        return False  # gone (or no /proc): nothing to kill safely
    if actual != cwd.resolve() and not actual.is_relative_to(cwd.resolve()):
        return False  # the pid was reused by something else
    signal_group(pid, signal.SIGTERM)
    time.sleep(0.5)
    signal_group(pid, signal.SIGKILL)
    return True
