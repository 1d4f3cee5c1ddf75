"""Recovery of runs whose daemon died: this home's previous daemon at start, and in a team the daemons whose lease
ran out (services/team.py decides which). Their leftover processes here are killed, their work is kept on the task
branch (published to the remote for a team), their agents freed and their tasks requeued.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path
from typing import Any

from ..services import Services
from ..services.agents import release_agents
from ..services.errors import ServiceError
from ..services.lifecycle import Lifecycle
from . import run_usage
from .runner import signal_group
from .workspaces import Workspace, Workspaces

log = logging.getLogger("agentqueue.engine")


def save_wip(workspaces: Workspaces, workspace: Workspace, task_id: str, shared: bool) -> None:
    """An interrupted run's work committed on its branch; with `shared` (a team) published, since the next run may
    be another daemon's and it continues from the remote's copy."""
    if workspace.repo is not None and workspace.path.exists():
        try:
            workspaces.commit_leftovers(workspace, f"WIP: interrupted run of AgentQueue task {task_id}")
            if shared:
                workspaces.publish_branch(workspace)
        except ServiceError as error:
            log.warning("could not save WIP of %s: %s", task_id, error)
        finally:
            workspaces.settle(workspace)  # kept for the next run: its `.git` the daemon's until then


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


class Recovery:
    def __init__(self, services: Services, lifecycle: Lifecycle, workspaces: Workspaces) -> None:
        self.services = services
        self.lifecycle = lifecycle
        self.workspaces = workspaces
        self.team = services.team

    def recover(self) -> list[str]:
        """At start: the runs this home's previous daemon left (kill orphans, keep their work, requeue them)."""
        if not self.team.shared:  # their runs died with the last daemon, and no other daemon asks anything
            for request_id in self.services.requests.expire_orphans():
                log.info("permission request %s expired: its run ended with the daemon", request_id)
        recovered = self.take_over(at_start=True)
        if not self.team.shared:
            with self.services.store.transaction():
                release_agents(self.services.store)
        stale = run_usage.sweep(self.services.home)  # no run of this home goes on before its daemon's start
        if stale:
            log.info("removed %d usage record(s) of runs that had ended before the last daemon stopped", stale)
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
                if self._requeue(task_id, Path(dead.home) if dead.here else None):
                    recovered.append(task_id)
        return recovered

    def requeue_here(self, task_id: str, home: Path) -> bool:
        """A run of this daemon's that has nothing behind it any more (stranded.py), requeued as a dead one's."""
        return self._requeue(task_id, home)

    def _requeue(self, task_id: str, home: Path | None) -> bool:
        """One run of a dead daemon requeued; `home`: that daemon's, when it ran on this machine. False when the
        task is gone."""
        row = self.services.store.one("SELECT * FROM tasks WHERE id = ?", (task_id,))
        if row is None:
            return False
        if home is not None:
            self._stop_leftover(row, home)
            self._pay_for_cut_run(task_id, home)
        for request in self.services.requests.list("pending", task_id=task_id):
            self.services.requests.expire(request.id, "run ended with its daemon")
        with self.services.store.transaction():
            release_agents(self.services.store, task_id=task_id)
            status = self.lifecycle.requeue(task_id, "recovered", count_retry=True)
        log.info("recovered task %s -> %s", task_id, status)
        return True

    def _pay_for_cut_run(self, task_id: str, home: Path) -> None:
        """The ledger row of a run its daemon's death cut, from what its stream had shown (run_usage.py), unless the
        run's own record was made before the daemon died (a ledger row of the task since the run started)."""
        cut = run_usage.cut_run(home, task_id)
        if cut is None:
            return
        agent_id, since, result = cut
        if not self.services.store.scalar("SELECT 1 FROM token_ledger WHERE task_id = ? AND timestamp >= ? LIMIT 1",
                                          (task_id, since)):
            self.lifecycle.record_usage(task_id, agent_id, result)
            log.info("recovered task %s: its cut run's %d tokens are in the ledger (partial)", task_id,
                     result.tokens["total"])
        run_usage.discard(home, task_id)

    def _stop_leftover(self, row: dict[str, Any], home: Path) -> None:
        """A dead daemon's agent process on this machine is killed, and the work in its worktree kept."""
        agent = self.services.store.one("SELECT pid FROM agents WHERE current_task = ?", (row["id"],))
        workspace = self._workspace_of(row, home)
        if agent and agent["pid"]:
            kill_orphan(agent["pid"], workspace.path)
        # Its worktree is registered in that daemon's checkout of the repo: its git is found from there.
        theirs = Workspaces(home / "worktrees", home / "checkouts" if self.team.shared else None)
        save_wip(theirs, workspace, row["id"], self.team.shared)

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
