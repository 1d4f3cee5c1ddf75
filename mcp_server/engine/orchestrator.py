"""The engine loop: recover, resume paused tasks, schedule, claim, run agents, land their work.

One engine per AGENTQUEUE_HOME (the daemon's lock decides). Runs are tasks in the engine's task
group; each ends in exactly one state change, and a run that dies with the daemon is recovered on
the next start (WIP committed on its branch, the orphan process group killed, the task requeued).
This module is the run loop, one task from claim to landing; the jobs it calls on have their own
modules: queue_state.py (what the scheduler reads), landing.py (merge, PRs), recovery.py (dead runs).
"""


from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from .. import paths
from ..services import Services
from ..services.errors import ServiceError
from ..services.policy_rules import tool_action
from ..services.system import no_repo_warning
from ..settings import Settings
from ..services.lifecycle import Lifecycle
from ..services.repo_config import Check, declared_checks
from ..services.send_backs import held_reruns
from ..services.tasks import AmbiguousRepoError
from ..sandbox import limits
from ..store.models import Agent, Task
from . import protected
from .adapters import BUILDERS, PARSERS
from .adapters.base import AgentConfig, RunResult, RunSpec
from .hook_runner import HookRunner
from .agent_mcp import TAKES_MCP_CONFIG, agentqueue_server, cli_environment
from .best_of import BestOfN
from .land_guards import LandLimits
from .landing import BranchReads, Landing
from .merge_queue import MergeQueue, Queued, unresolved, unresolved_told
from .parking import QueueParking
from ..notify.follower import Notifier
from ..sandbox.model_keys import kept_out
from .permissions import PermissionChannel
from .acp_client import AcpChannel, sandboxed as acp_sandbox
from .adapters.acp import AcpSession, agent_binary
from .adapters.acp_presets import sandbox_kind
from .ports import Ports
from .prompting import context_for, task_prompt
from .queue_state import read_queue_state
from .ready import NotReady, Readiness, WorktreeSetup
from .recovery import Recovery, save_wip
from . import run_usage
from .run_usage import UsageCheckpoint, usage_path
from .runner import RunHandle, run_agent
from .scheduler import QueueState, schedule
from .stranded import Room, Stranded
from .watchdog import WatchdogLimits
from .workspaces import Workspace, Workspaces

log = logging.getLogger("agentqueue.engine")


# Events after which a scheduling pass may find something new to start.
WAKING_EVENTS = frozenset({"task.created", "task.ready", "task.restarted", "task.updated", "task.status_overridden",
                           "task.changes_requested", "orchestrator.resumed", "project.created", "project.resumed",
                           "project.updated", "agent.created", "agent.updated", "agent.resumed", "queue.resumed"})
RESCAN_SECONDS = 30.0  # a pass even when nothing woke the engine (a rolling budget window frees a project)


@dataclass
class EngineConfig:
    """Tunables (config.toml [engine] and AGENTQUEUE_* variables; see settings.py)."""

    poll_seconds: float = 1.0
    rate_limit_backoff: float = 60
    rate_limit_max_backoff: float = 900
    max_turns: int = 50
    pr_poll_seconds: float = 60
    login_check_seconds: float = 30  # the first check of a kind parked on a failed login (engine/parking.py)
    agent_nice: int = 10  # how far below the daemon an agent's session runs (services/cpu_priority.py)
    limits: WatchdogLimits = field(default_factory=WatchdogLimits)

    @classmethod
    def from_settings(cls, settings: Settings) -> EngineConfig:
        e = settings.engine
        return cls(poll_seconds=e["poll_seconds"], rate_limit_backoff=e["rate_limit_backoff"],
                   rate_limit_max_backoff=e["rate_limit_max_backoff"], max_turns=int(e["max_turns"]),
                   pr_poll_seconds=e["pr_poll_seconds"], login_check_seconds=e["login_check_seconds"],
                   agent_nice=int(e["agent_nice"]),
                   limits=WatchdogLimits(stall_seconds=e["stall_seconds"], timeout_seconds=e["task_timeout"]))


@dataclass
class ReadyRun:
    """A started task and what its agent is given (Engine._ready)."""

    task: Task
    workspace: Workspace
    agent: Agent
    spec: RunSpec
    planted: dict[str, bytes | None] | None  # run-configuring files an earlier run changed (Engine._planted)
    env: dict[str, str]
    readiness: Readiness  # what the worktree was made ready with (the repo's .agentqueue.toml), the run's port


# Agent CLIs that read project settings from the worktree and have no switch to skip them.
MASKED_AGENTS = ("codex", "gemini", "acp")


def completed_warning(task: Task, workspace: Workspace, result: RunResult, read: BranchReads) -> str | None:
    """What a completed run's result warns of: no file changed in its repo, or no repo at all (a scratch folder)."""
    if result.status != "completed":
        return None
    if workspace.repo is None:
        return no_repo_warning(task.project_id, str(workspace.path))
    if read.listed == []:
        warning = f"The agent finished without changing any file in repo '{workspace.repo.id}'."
        log.warning("task %s: %s", task.id, warning)
        return warning
    return None


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
        self.workspaces.on_note = lambda path, line: self._log_line(path.name, line)  # a worktree's folder: its task
        services.sandbox.git_objects = self.workspaces.objects_for  # a worktree's repository: its objects, read-only
        self.running: dict[str, RunHandle] = {}
        # The queue lands through Landing and Landing sends conflicts back through the queue: bound late, once.
        self.landing = Landing(services, self.lifecycle, self.workspaces, self._log_line,
                               send_back_conflict=lambda task, tree: self.queue.send_back_conflict(task, tree))
        # What a repo's .agentqueue.toml asks of each worktree, and a port per running task (ready.py, ports.py).
        self.ports = Ports()
        self.worktree_setup = WorktreeSetup(services, home, self.workspaces, self.ports, self._log_line,
                                   self.config.limits.timeout_seconds)
        self.workspaces.before_remove = self.worktree_setup.teardown
        self.queue = MergeQueue(services, self.lifecycle, self.workspaces, self.landing, self._log_line,
                                self.config.limits.timeout_seconds, task_env=self.worktree_setup.task_env)
        self.best_of = BestOfN(services, self.lifecycle, self.workspaces, self.queue, self._log_line,
                               lambda task_id: task_id in self.running)
        self.recovery = Recovery(services, self.lifecycle, self.workspaces)
        self.stranded = Stranded(services, self.recovery, home, self.team.id, lambda: list(self.running))
        self.room = Room(home)
        self.lifecycle.no_room = self._no_room
        self.parking = QueueParking(services, (self.config.rate_limit_backoff, self.config.rate_limit_max_backoff),
                                    self.config.login_check_seconds, owner=self.team.id)
        self.hooks = HookRunner(services, home)
        # Tells a person when one is needed, from its own thread (notify/); the daemon gives it the board's address.
        self.notifier = Notifier(services.store, services.settings, owner=self.team.id)
        self.shutting_down = False
        self._poked = True
        self._last_pr_poll = 0.0
        self._last_pass = 0.0
        self.ticks = 0  # loop passes done: what a wait for "the engine looked and did nothing" counts
        services.engine_hooks.connect(stop_run=self.stop_task, land_approved=self.land_approved, hook_runner=self.hooks,
                                      discard_branch=self.best_of.discard)
        services.store.on_commit(self._on_commit)

    def apply_settings(self, settings: Settings) -> None:
        """config.toml was edited and reloaded (settings_reload.py): new runs, passes and checks use its values."""
        self.config = EngineConfig.from_settings(settings)
        self.landing.limits = LandLimits.from_engine(settings.engine)
        self.worktree_setup.timeout = self.config.limits.timeout_seconds
        self.queue.check_timeout = int(max(1, min(600, self.config.limits.timeout_seconds)))
        self.parking.backoff = (self.config.rate_limit_backoff, self.config.rate_limit_max_backoff)
        self.parking.check_seconds = self.config.login_check_seconds
        self.notifier.reload(settings)  # [notify]: the next event uses it; the first URL starts the notifier
        self.notifier.start()

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
        """approve_task: merge the kept branch now (landing.py)."""
        self.landing.land_approved(task)

    def _on_commit(self, events: list[dict[str, Any]]) -> None:
        if any(e["event_type"] in WAKING_EVENTS for e in events):
            self._poked = True

    # -- the loop ------------------------------------------------------------------------------
    async def run(self) -> None:
        """Join the daemons on the queue (a lease kept fresh while the engine runs, a daemon's or a standalone
        server's alike), recover, then schedule and run until shutdown; leave at the end."""
        await anyio.to_thread.run_sync(self.team.join)
        self.notifier.start()
        try:
            async with anyio.create_task_group() as lease:
                lease.start_soon(self._keep_lease)
                await self._run()
                lease.cancel_scope.cancel()  # only once every run has settled: they are this engine's to the end
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self.notifier.stop)
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
            tg.start_soon(self._check_logins)
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
                self.ticks += 1
                if self.flush:
                    await self.flush()
                waited = 0.0
                while waited < self.config.poll_seconds and not self._poked and not self.shutting_down:
                    await anyio.sleep(0.02)
                    waited += 0.02
            hooks_scope.cancel()  # the hook runner goes with the engine; runs in flight finish first

    async def _check_logins(self) -> None:
        """Agent kinds parked on a failed login come back once a real check shows the login works (parking.py)."""
        while not self.shutting_down:
            try:
                if await self.parking.check_logins():
                    self._poked = True
            except Exception:
                log.exception("login check failed")
            await anyio.sleep(min(1.0, self.config.poll_seconds * 5))

    def _no_room(self, task_id: str, reason: str) -> bool:
        """A worktree or a landing that failed for want of disk space: the task goes back to the queue (Lifecycle.
        blocked), its worktree first put back to its branch's last commit where a merge into it stopped half-written
        (the work is committed before a landing; what the merge wrote is the default branch's, merged again later)."""
        if not self.room.explains():
            return False
        task = self.services.tasks.get(task_id)
        if reason == "merge_failed" and task.repo_id and task.branch:
            workspace = Workspace(self.workspaces.path_for(task.repo_id, task_id), task.branch,
                                  self.services.repos.get(task.repo_id))
            try:  # the daemon's own view of the worktree's git (Workspaces.tree), never what the run left at .git
                self.workspaces.tree(workspace).run("reset", "--quiet", "--merge")
            except Exception:  # the disk may still be full: the next landing's own merge says what it finds
                log.warning("task %s: could not undo the half-written merge in %s", task_id, workspace.path)
        return True

    def tick(self, full: bool = True) -> list[tuple[str, str]]:
        """Resume due PAUSED tasks and parked kinds, check PRs (every 60 s), and with `full` schedule and claim;
        returns the runs to start."""
        self.lifecycle.resume_due()
        self.parking.resume_due()
        if time.monotonic() - self._last_pr_poll >= self.config.pr_poll_seconds:
            self._last_pr_poll = time.monotonic()
            self.landing.poll_pull_requests()
        try:
            self.stranded.sweep()
        except Exception:  # the store refused a write (a full disk): the next sweep tries again
            log.exception("the sweep for stranded runs failed")
        if not full or not self.room.enough():
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
        """The scheduler's read model (queue_state.py), without the agent kinds parked for this daemon's accounts."""
        return read_queue_state(self.services, self.team, self.workspaces, self.parking.held(),
                                frozenset(held_reruns(self.services.store)))

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
            # return while an agent is still marked BUSY. A question the run left open is moot now. A task whose
            # failed run sent it back READY may be claimed again before this: its new run's port, usage record and
            # handle are the new run's.
            if self.running.get(task_id) is handle:
                self.worktree_setup.end(task_id)  # its port is free again
                run_usage.discard(self.home, task_id)  # the run is over, and its own record (if any) made
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self._release, task_id, agent_id)
            if self.running.get(task_id) is handle:
                self.running.pop(task_id, None)
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self._settle_group, task_id)
            self._poked = True
            if self.flush:
                await self.flush()

    def _settle_group(self, task_id: str) -> None:
        """After a best-of-N candidate's run, whatever its end: its group decided when it can be (best_of.py)."""
        group = self.services.store.scalar("SELECT candidate_of FROM tasks WHERE id = ?", (task_id,))
        if group:
            self._settle_group_id(group)

    async def _execute(self, task_id: str, agent_id: str, handle: RunHandle) -> None:
        svc = self.services
        ready = await anyio.to_thread.run_sync(self._ready, task_id, agent_id)
        if ready is None:
            return  # held (BLOCKED), or its worktree could not be made ready, before the agent started
        task, workspace, agent, spec = ready.task, ready.workspace, ready.agent, ready.spec
        log.info("run of %s started: agent %s (%s) in %s%s", task_id, agent.id, agent.agent_type, workspace.path,
                 f" on branch {workspace.branch}" if workspace.branch else "")
        if self.flush:
            await self.flush()
        started = time.monotonic()

        def remember_pid() -> None:
            self.lifecycle.set_pid(agent_id, handle.pid)

        log_path = self.log_path(task_id)
        on_log = self.on_log
        on_line = (lambda _line: on_log(task_id)) if on_log else None
        env = ready.env
        # Claude Code skips planted settings itself (--setting-sources user) and may still edit them; a CLI with no
        # such switch sees the default branch's files over the planted ones, read-only, for this run.
        masks = ready.planted or {} if agent.agent_type in MASKED_AGENTS else {}
        channel: Any = PermissionChannel(svc, task.project_id, task.id, agent.id, workspace.path,
                                         lambda line: self._log_line(task_id, line))
        if isinstance(spec.parser, AcpSession):  # an ACP agent asks for files and terminals too (acp_client.py)
            preset = await anyio.to_thread.run_sync(lambda: svc.policies.effective(task.project_id).preset.name)
            contain = acp_sandbox(svc, workspace.path, task.project_id, task.id, preset,
                                  f"agent:{agent.id}", lambda line: self._log_line(task_id, line))
            channel = AcpChannel(channel, contain, ready.env, handle,
                                 masks={workspace.path / rel: content for rel, content in masks.items()},
                                 nice=self.config.agent_nice)
        # The sandbox is set up and taken down in a worker thread (its paths, the policy, the gate's sockets, the
        # run's cgroup): several ms that would hold up every other run on the event loop. The thread is waited for
        # even when cancelled, and no await comes between its start and the `try`, so the gate is always closed.
        contained = self._contained(task, agent, workspace, spec, env, masks)
        spec, env = await anyio.to_thread.run_sync(contained.__enter__)
        try:
            with contextlib.ExitStack() as stack:
                if isinstance(spec.parser, AcpSession):
                    spec.parser.run_env = env  # where the agent's own files are (its CODEX_HOME), read after the run
                if isinstance(channel, AcpChannel):  # its terminals hold no model key the gate keeps for the run
                    channel.env = kept_out(channel.env, env)
                runner = run_agent(spec, workspace.path, spec.parser or PARSERS[agent.agent_type](), handle, log_path,
                                   self.config.limits, on_line, env=env, channel=channel, nice=self.config.agent_nice,
                                   checkpoint=UsageCheckpoint(usage_path(self.home, task_id), agent.id))
                if isinstance(channel, AcpChannel):
                    stack.callback(channel.close)  # its terminals end with the run
                async with anyio.create_task_group() as tg:
                    async def note_pid() -> None:
                        while handle.pid is None:
                            await anyio.sleep(0.01)
                        await anyio.to_thread.run_sync(remember_pid)
                    tg.start_soon(note_pid)
                    result = await runner
                    tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(contained.__exit__, None, None, None)
        duration = time.monotonic() - started
        log.info("run of %s ended: %s%s after %.1f s, %d tokens%s, $%s", task_id, result.status,
                 f" ({result.error_type})" if result.error_type else "", duration,
                 int(result.tokens.get("total", 0)), " (partial)" if result.partial else "",
                 "?" if result.cost_usd is None else f"{result.cost_usd:.4f}")
        if self.shutting_down and handle.stop_reason == "killed":
            await anyio.to_thread.run_sync(self._requeue_after_shutdown, task, workspace, agent, result)
            return
        if self.parking.parks(agent.agent_type, result):
            await anyio.to_thread.run_sync(self._park, task, workspace, agent, result, duration)
            return
        queued = await anyio.to_thread.run_sync(self._finish, task, workspace, agent, result, duration,
                                                ready.readiness)
        if queued is not None and await self.queue.land_in_turn(queued):  # its repo's merge queue, in order
            await anyio.to_thread.run_sync(self._remember, task, result)

    def _ready(self, task_id: str, agent_id: str) -> ReadyRun | None:
        """Everything before a run, in one worker thread (the store is never read on the event loop): the task
        started (`_start`), then what the agent is given; None when the task was BLOCKED instead."""
        svc = self.services
        agent = svc.agents.get(agent_id)
        started_in = self._start(task_id, agent)
        if started_in is None:
            return None
        task, workspace, readiness = started_in
        self.queue.merge_again(task, workspace)  # a rerun that waited: the default branch it merges, anew
        tools = agent.agent_type in TAKES_MCP_CONFIG
        mcp = agentqueue_server(self.home, ("agent",)) if tools else None
        planted = self._planted(task.id, agent.agent_type, workspace)
        config = self._agent_config(agent, task.project_id, project_settings=planted == {})
        config.model = task.model or config.model  # a task's model overrides its agent's for this run
        spec = BUILDERS[agent.agent_type](config,
                                          task_prompt(task, svc.feedback.comments(task.id),
                                                      svc.feedback.failed_check(task.id)),
                                          context_for(svc, task, workspace, agent_tools=tools, ready=readiness,
                                                      agent=agent), mcp)
        env = {**svc.settings.agent_environment(sandbox_kind(agent.agent_type, agent.command)), **readiness.env}
        env |= cli_environment(self.home, task.id, env)  # `agentqueue task …`, for agents without MCP
        return ReadyRun(task, workspace, agent, spec, planted, env, readiness)

    def _start(self, task_id: str, agent: Agent) -> tuple[Task, Workspace, Readiness] | None:
        """Before a run, in one worker thread: the command agent's policy, the sandbox, the workspace, the task
        IN_PROGRESS, then the worktree made ready (the repo's setup, its port); (the task as it now is, its
        workspace, what it is ready with), or None when the task was BLOCKED or failed instead."""
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
        try:
            readiness = self.worktree_setup.start(task, workspace)
        except NotReady as error:
            self._not_ready(task, agent, error)
            return None
        return task, workspace, readiness

    def _not_ready(self, task: Task, agent: Agent, error: NotReady) -> None:
        """A worktree that could not be made ready: the run fails before the agent starts, with the reason in the
        task's log and result (a bad .agentqueue.toml is not retried; a failed setup is, like any failed run)."""
        message = str(error)
        self._log_line(task.id, f"[setup] {message}")
        log.warning("task %s: %s", task.id, message)
        self.lifecycle.record_attempt(task.id, agent.id, RunResult("failed", error_type=error.kind,
                                                                   error_message=message), 0.0, [])
        self.lifecycle.failed(task.id, error.kind, message, agent_type=agent.agent_type)

    @contextlib.contextmanager
    def _contained(self, task: Task, agent: Agent, workspace: Workspace, spec: RunSpec, env: dict[str, str],
                   planted: dict[str, bytes | None]) -> Iterator[tuple[RunSpec, dict[str, str]]]:
        """The run's argv inside the OS sandbox (its rules stated in the task log), with the network gate open
        while it runs; unsandboxed only when a person set [sandbox] required = false and none can start.
        Settings an unmerged earlier run planted are shown to it as the default branch has them."""
        policy = self.services.policies.effective(task.project_id)
        with self.services.sandbox.around(
                spec.argv, env, workspace.path, task.project_id, preset=policy.preset.name, actor=f"agent:{agent.id}",
                task_id=task.id, agent_type=sandbox_kind(agent.agent_type, agent.command),
                agent_socket=True,  # every agent reaches its toolset: through MCP, or `agentqueue task …`
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
        binary = agent_binary(agent.agent_type, agent.command, self.services.settings)
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
            planted = protected.planted_settings(self.workspaces.tree(workspace), workspace.repo.default_branch)
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

    def _finish(self, task: Task, workspace: Workspace, agent: Agent, result: RunResult, duration: float,
                ready: Readiness | None = None) -> Queued | None:
        """`_conclude`, then the worktree, when it is kept, settled (its `.git` the daemon's again)."""
        try:
            return self._conclude(task, workspace, agent, result, duration, ready)
        finally:
            self.workspaces.settle(workspace)

    def _conclude(self, task: Task, workspace: Workspace, agent: Agent, result: RunResult, duration: float,
                  ready: Readiness | None = None) -> Queued | None:
        """A run's end, in one worker thread: its branch read, the attempt recorded, then the task failed, done, or
        its branch landed (landing.py); returned when it waits in its repo's merge queue instead (a repo with
        checks, its declared ones else the verify command: merge_queue.py, repo_config.py)."""
        if not self.lifecycle.owns(task.id):
            # Another daemon took the run over (this one's lease ran out): its rerun is the one that lands.
            log.warning("run of %s ended after another daemon took it over: its result is dropped", task.id)
            self._paid_for(task, agent, result)  # not its result: the tokens it used were spent all the same
            return None
        read = BranchReads()
        if workspace.repo is not None:
            try:
                read = self.landing.read_branch(task, workspace)
            except ServiceError as error:
                log.warning("could not commit leftovers of %s: %s", task.id, error)
        config = ready.config if ready else None  # the repo's .agentqueue.toml as the run started with it
        checks: list[Check] = []
        if result.status == "completed" and workspace.repo is not None and not task.requires_approval \
                and not task.candidate_of:
            checks = self.queue.checks(task, config)  # run by the queue, on the branch brought up to date
        verified = result.status == "completed" and not checks and not task.candidate_of \
            and self._verified(task, workspace, result, ready)
        if verified:
            read.rules = read.tips = None  # the verify command ran in the worktree: they are read again
        self.lifecycle.record_attempt(task.id, agent.id, result, duration, read.files,
                                      completed_warning(task, workspace, result, read))
        if result.status != "completed":
            self._failed(task, agent, result)
        elif not self.lifecycle.running(task.id):
            return None  # stopped meanwhile: stop_task already decided
        elif task.candidate_of and workspace.repo is not None:
            self.best_of.check(task, workspace, read)  # checked, never landed here: its group picks (best_of.py)
        elif workspace.repo is None:
            self.lifecycle.succeeded(task.id, awaiting_approval=task.requires_approval)
            if not task.requires_approval:
                self._remember(task, result)
        elif self._still_conflicted(task, workspace, agent):
            return None  # sent back again (or held): nothing conflicted ever lands
        elif checks:
            queued = Queued(task, workspace, read, agent.id, port_env=config.port_env if config else None)
            self.queue.enter(queued)
            return queued
        elif self.landing.land(task, workspace, read, verified):
            self._remember(task, result)
        return None

    def _verified(self, task: Task, workspace: Workspace, result: RunResult, ready: Readiness | None) -> bool:
        """The checks on a completed run that lands without the merge queue (held for approval, or no repo): whether
        some ran and passed; a failure fails the run."""
        checks = declared_checks(ready.config if ready else None, self.services.projects.get(task.project_id))
        failure = self._verify(task, workspace, checks, ready.env if ready else {})
        if failure:
            result.status, result.error_type, result.error_message = "failed", "verify_failed", failure
        return failure is None and bool(checks)

    def _still_conflicted(self, task: Task, workspace: Workspace, agent: Agent) -> bool:
        """A run the merge queue sent back that left unmerged paths or conflict markers in what its branch adds:
        sent back again, or held when its retries are spent. Read only for tasks that were sent back."""
        repo = workspace.repo
        assert repo is not None
        if not self.lifecycle.sends_back(task.id):
            return False
        try:
            files = unresolved(self.workspaces.tree(workspace), repo.default_branch)
        except ServiceError as error:
            log.warning("could not look for conflict markers in %s: %s", task.id, error)
            return False
        if not files:
            return False
        sent = self.queue.send_back(task, agent.id, "unresolved", {"conflicts": files},
                                    unresolved_told(repo.default_branch, files))
        if not sent:
            self.lifecycle.blocked(task.id, "merge_conflict", {
                "repo_id": repo.id, "branch": workspace.branch, "default_branch": repo.default_branch,
                "checkout": str(self.workspaces.checkout_of(repo)), "conflicts": files, "refusal": sent.refusal,
                "message": f"Conflict markers are still in {', '.join(files)} after the agent's runs."})
        return True

    def _failed(self, task: Task, agent: Agent, result: RunResult) -> None:
        """A run that did not complete: FAILED or retried, or PAUSED with a growing backoff on a rate limit."""
        pause = None
        if result.error_type in ("rate_limit", "quota"):
            streak = self.lifecycle.consecutive_pauses(task.id)
            base = self.config.rate_limit_backoff * (5 if result.error_type == "quota" else 1)
            pause = min(base * 2 ** max(streak - 1, 0), self.config.rate_limit_max_backoff)
        self.lifecycle.failed(task.id, result.error_type, result.error_message, pause, agent.agent_type)

    def _remember(self, task: Task, result: RunResult) -> None:
        """A line in today's project memory for each completed task."""
        summary = (result.summary or "").strip().splitlines()
        line = f"- {time.strftime('%H:%M')} task {task.id} \"{task.title}\" completed" + (
            f": {summary[0][:200]}" if summary else "")
        try:
            self.services.memory.append_today(task.project_id, line)
        except (OSError, ServiceError) as error:
            log.warning("could not write memory for %s: %s", task.id, error)

    def _verify(self, task: Task, workspace: Workspace, checks: list[Check], env: dict[str, str]) -> str | None:
        """The checks on the agent's work (VERIFYING), in order, with the task's port; why the first failing one
        failed, if one did. `checks`: the repo's declared ones, else the project's verify command (repo_config)."""
        if not checks or not self.lifecycle.running(task.id):
            return None
        self.lifecycle.verifying(task.id)
        for check in checks:
            # The project's verify command keeps its words; a repo's check is named as the repo named it.
            tag, named = ("verify", "verify") if check.name == "verify" else (f"check {check.name}",
                                                                              f"check '{check.name}'")
            timeout = int(min(check.timeout, self.config.limits.timeout_seconds))
            try:
                self.workspaces.expose(workspace)  # the run's repository as the daemon's branch has it now
                outcome = self.services.files.run(check.command, workspace.path, timeout, actor="verify",
                                                  task_id=task.id, env=env)
            except ServiceError as error:
                return f"{named} command could not run: {error}"
            with self.log_path(task.id).open("a", encoding="utf-8") as log_file:
                log_file.write(f"[{tag}] $ {check.command} -> {outcome.returncode}\n"
                               f"{outcome.stdout[-4000:]}{outcome.stderr[-4000:]}\n")
            if outcome.returncode != 0:
                return (f"{named} command `{check.command}` "
                        + ("timed out" if outcome.timed_out else f"exited {outcome.returncode}")
                        + f": {(outcome.stderr or outcome.stdout).strip()[-500:]}")
        return None

    def _requeue_after_shutdown(self, task: Task, workspace: Workspace, agent: Agent, result: RunResult) -> None:
        save_wip(self.workspaces, workspace, task.id, self.team.shared)
        self.lifecycle.requeue(task.id, "shutdown", count_retry=False)
        self._paid_for(task, agent, result)  # no attempt, but what it used was spent

    def _paid_for(self, task: Task, agent: Agent, result: RunResult) -> None:
        """The ledger row of a run that is no attempt; never in the way of the requeue or take-over around it."""
        try:
            self.lifecycle.record_usage(task.id, agent.id, result)
        except Exception:
            log.exception("could not record the usage of %s's stopped run", task.id)

    def _park(self, task: Task, workspace: Workspace, agent: Agent, result: RunResult, duration: float) -> None:
        """A run that met a failed login or a usage limit: its kind parks for the whole queue and its task goes back
        to READY with its work saved, no retry counted, like a shutdown's (engine/parking.py)."""
        if not self.lifecycle.owns(task.id):
            return
        self.lifecycle.record_attempt(task.id, agent.id, result, duration, [])
        save_wip(self.workspaces, workspace, task.id, self.team.shared)
        self.parking.park_run(agent.agent_type, result)
        self.lifecycle.requeue(task.id, "parked", count_retry=False)
        self._log_line(task.id, f"[queue] {agent.agent_type} agents are parked ({result.error_type}); this task is "
                                "READY again and runs when they resume.")

    def _release(self, task_id: str, agent_id: str) -> None:
        """After a run, whatever its end: the questions it left open expire, and its agent is free again."""
        try:
            for request in self.services.requests.list("pending", task_id=task_id):
                self.services.requests.expire(request.id, "run ended")
        finally:
            self.lifecycle.free_agent(agent_id, task_id)

    # -- start and stop ----------------------------------------------------------------------------
    def recover(self) -> list[str]:
        """At start: the runs this home's previous daemon left (recovery.py), and best-of-N groups whose candidates
        all ended before that daemon could decide them."""
        recovered = self.recovery.recover()
        for group in self.services.store.all("SELECT id FROM tasks WHERE best_of IS NOT NULL AND status = 'DEFINED'"):
            self._settle_group_id(group["id"])
        return recovered

    def _settle_group_id(self, group_id: str) -> None:
        try:
            self.best_of.settle(group_id)
        except Exception:
            log.exception("could not settle best-of-N task %s", group_id)

    def take_over(self, at_start: bool = False) -> list[str]:
        """The runs of daemons found dead (recovery.py)."""
        return self.recovery.take_over(at_start)

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
        # The runs' cgroups still emptying as their last processes exit (sandbox/limits.py): removed before the stop.
        await anyio.to_thread.run_sync(limits.settled, 2.0)

