"""Landing a finished run's branch: read it, then merge it (fast-forward when it can), or hold it for review in a PR.

Also what follows a review: approve_task merges a kept branch, and PRs awaiting approval are polled (merged on
GitHub -> COMPLETED, closed -> BLOCKED). The git itself is workspaces.py's; the `gh` calls are services/vcs.py's.
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..services import Services, gitops
from ..services.errors import ServiceError
from ..services.lifecycle import Lifecycle
from ..services.repo_config import Check
from ..services.vcs import find_gh
from ..store.models import Task
from . import land_guards, protected
from .workspaces import Tips, Workspace, Workspaces

log = logging.getLogger("agentqueue.engine")

# Reads of a finished run's branch that run at once (Landing.read_branch): a few git processes per landing.
_READS = concurrent.futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix="agentqueue-git")


def _hooks_of(tips: concurrent.futures.Future[Tips]) -> Callable[[], str]:
    """The hooks folder the tips' read gives, once it has run (its error, if it failed)."""
    return lambda: tips.result().hooks or ""


@dataclass
class BranchReads:
    """What `read_branch` read of a finished run's branch; rules and tips are None when they must be read again."""

    listed: list[dict[str, str]] | None = None  # the changed files; None when unknown (no repo, a git error)
    touched: list[str] | None = None  # every path the branch changes (both sides of a rename), read once
    rules: list[protected.Rule] | None = None
    tips: Tips | None = None

    @property
    def files(self) -> list[str]:
        return [f["path"] for f in self.listed or ()]


class Landing:
    def __init__(self, services: Services, lifecycle: Lifecycle, workspaces: Workspaces,
                 log_line: Callable[[str, str], None],
                 send_back_conflict: Callable[[Task, Workspace], bool] | None = None) -> None:
        self.services = services
        self.lifecycle = lifecycle
        self.workspaces = workspaces
        self.team = services.team
        self.log_line = log_line  # a line of the engine's own in a task's log
        # Sends a conflicting task back to its agent (merge_queue.py); False when its merge_retries are spent.
        self.send_back_conflict = send_back_conflict
        # What a landing may add before a person sees it ([engine] land_max_*; the engine sets it on a reload).
        self.limits = land_guards.LandLimits.from_engine(services.settings.engine)

    # -- a finished run --------------------------------------------------------------------------
    def read_branch(self, task: Task, workspace: Workspace) -> BranchReads:
        """The finished run's leftovers committed, and what its landing reads of the branch: the changes, the
        protected-path rules and both tips, all read at once beside the leftovers' `status` (they only read
        commits, the index and config); read again, one after another, when that status found leftovers."""
        # The run's own commits first, taken from its repository as from a hostile remote (engine/run_repo.py).
        self.workspaces.collect(workspace, task.id)
        lands_here = not task.requires_approval and not self.team.shared  # else no tips are needed (a PR, origin)
        # The tips' rev-parse also gives the hooks folder the rules need (one command fewer than a `git config` of
        # their own). It is submitted before the rules, so a pool that runs tasks in order never has a rules read
        # waiting for a tips read that no worker has started.
        tips = _READS.submit(self.workspaces.tips, workspace) if lands_here else None
        hooks = _hooks_of(tips) if tips else None
        futures = (_READS.submit(self.workspaces.changes, workspace),
                   _READS.submit(protected.landing_rules, self.workspaces.tree(workspace), hooks), tips)
        started: list[concurrent.futures.Future[Any]] = [f for f in futures if f]
        try:
            committed = self.workspaces.commit_leftovers(workspace, f"{task.title}\n\nAgentQueue task {task.id}")
        finally:
            concurrent.futures.wait(started)  # nothing runs on in the background past here
        if committed is None:
            listed, touched = futures[0].result()
        else:
            listed, touched = self.workspaces.changes(workspace)
        reads = BranchReads(listed, touched)
        if committed is None and not futures[1].exception():
            reads.rules = futures[1].result()
        if committed is None and futures[2] and not futures[2].exception():
            reads.tips = futures[2].result()
        return reads  # rules or tips unread (leftovers, a git error): the landing reads them itself, as before

    def land(self, task: Task, workspace: Workspace, read: BranchReads, verified: bool) -> bool:
        """A completed run's branch onto the default branch, or held for review (a PR when it can); True when it
        merged. `verified`: a verify command ran in the worktree after its leftovers were committed."""
        repo = workspace.repo
        assert repo is not None
        # Protected paths (agent settings, git hooks, CI...), a resolution that drops landed lines, or a landing
        # too large never land unreviewed (engine/protected.py, engine/land_guards.py).
        hold = self.holds(task, workspace, read)
        if task.requires_approval or hold:
            self.hold(task, workspace, hold)
            return False
        where = {"repo_id": repo.id, "branch": workspace.branch, "default_branch": repo.default_branch,
                 "checkout": str(self.workspaces.checkout_of(repo))}
        if not self.lifecycle.running(task.id):
            return False  # stopped, or taken over by another daemon, while it verified
        counted = read.listed is not None
        try:
            landing = self.workspaces.land(workspace, via_remote=self.team.shared,
                                           files=read.files if counted else None,
                                           check_clean=verified or not counted, tips=read.tips)
        except ServiceError as error:
            self.lifecycle.blocked(task.id, "merge_failed", {**where, "error": str(error)})
            return False
        if landing.merged:
            self.lifecycle.succeeded(task.id, awaiting_approval=False, landed=(landing.base_sha, landing.sha),
                                     details={**where, "files": len(landing.files_changed)})
            # Cleanup once the task is done (its dependents may start): the run ends, and frees its agent, after it.
            self.workspaces.remove(workspace, landed_tip=landing.tip, clean=counted and not verified)
            return True
        if landing.conflicts and self.send_back_conflict and self.send_back_conflict(task, workspace):
            return False
        if landing.conflicts:
            self.lifecycle.blocked(task.id, "merge_conflict", {**where, "conflicts": landing.conflicts,
                                                               "message": landing.message})
        else:  # git refused to move the default branch, e.g. over the user's uncommitted edits
            self.lifecycle.blocked(task.id, "merge_failed", {**where, "dirty": landing.dirty,
                                                             "error": landing.message})
        return False

    def holds(self, task: Task, workspace: Workspace, read: BranchReads, checks: Sequence[Check] = (),
              base: str | None = None) -> land_guards.Holds:
        """Every reason the task's work waits for a person before it lands on `base` (the default branch's tip it
        lands on; default: the local default branch): protected paths, the files `checks` run among them, a
        conflict resolution that drops landed lines, its size. Never raises (a git error holds it, saying so)."""
        repo = workspace.repo
        assert repo is not None
        tree = self.workspaces.tree(workspace)
        branch = workspace.branch or "HEAD"
        onto = base or f"refs/heads/{repo.default_branch}"
        try:
            also = land_guards.check_rules(checks, tree, onto) if checks else []
        except (ServiceError, OSError) as error:
            return land_guards.Holds([protected.Hold([], error=f"the files its checks run: {error}")])
        return land_guards.Holds([
            protected.landing_hold(tree, repo.default_branch, branch, read.touched, read.rules, also=also),
            land_guards.dropped_lines(tree, repo.default_branch, onto, branch, self.conflict_forks(task, tree)),
            # The changes read_branch listed are against the local default branch: reused only when it is the base.
            land_guards.oversize(tree, onto, branch, self.limits, read.listed if base is None else None),
            land_guards.generated_added(tree, onto, branch, read.listed if base is None else None)])

    def conflict_forks(self, task: Task, tree: gitops.Checkout) -> list[str]:
        """Where the task's branch stood apart from the default branch each time the queue sent it back with a
        conflict, for the sends its branch still holds (the daemon's own record: `task.sent_back` events)."""
        forks = []
        for row in self.services.store.all("SELECT payload FROM events WHERE task_id = ? AND event_type = "
                                           "'task.sent_back' ORDER BY id", (task.id,)):
            payload = json.loads(row["payload"] or "{}")
            fork, tip = payload.get("fork"), payload.get("tip")
            if payload.get("kind") != "conflict" or not isinstance(fork, str) or not isinstance(tip, str):
                continue
            try:  # a branch started again (request_changes after a squash merge) no longer holds that resolution
                tree.run("merge-base", "--is-ancestor", tip, "HEAD")
            except ServiceError:
                continue
            forks.append(fork)
        return forks

    def hold(self, task: Task, workspace: Workspace, hold: land_guards.Holds | protected.Hold) -> None:
        """AWAITING_APPROVAL, in a PR when one can be opened; a hold says why in the log, a line per reason."""
        pr_url = self._open_pr(task, workspace)
        if hold:
            lines = hold.lines() if isinstance(hold, land_guards.Holds) else [("protected", hold.reason())]
            for tag, reason in lines:
                self.log_line(task.id, f"[{tag}] {reason}")
            log.warning("task %s waits for approval: %s", task.id, hold.reason())
        self.lifecycle.succeeded(task.id, awaiting_approval=True, pr_url=pr_url,
                                 held=(hold.reason(), hold.next_step(task.id, pr_url)) if hold else None)

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

    # -- after a review --------------------------------------------------------------------------
    def land_approved(self, task: Task) -> None:
        """approve_task: merge the kept branch now (raises on conflict); with a PR, GitHub merges it."""
        if not task.repo_id or not task.branch:
            return
        if task.pr_url:
            self.drop_worktree(task)
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

    def drop_worktree(self, task: Task) -> None:
        """The worktree of work that now lives in a PR (the branch stays, it is the PR's head)."""
        if task.repo_id:
            repo = self.services.repos.get(task.repo_id)
            workspace = Workspace(self.workspaces.path_for(repo.id, task.id), task.branch, repo)
            if workspace.path.exists():
                self.workspaces.remove(workspace, delete_branch=False)

    def poll_pull_requests(self) -> list[tuple[str, str]]:
        """AWAITING_APPROVAL tasks with a PR: merged on GitHub -> COMPLETED, closed -> BLOCKED."""
        changed: list[tuple[str, str]] = []
        if find_gh(self.services.settings) is None:
            return changed
        for row in self.services.store.all(
                "SELECT id, repo_id FROM tasks WHERE status = 'AWAITING_APPROVAL' AND pr_url IS NOT NULL"):
            task = self.services.tasks.get(row["id"])
            assert task.pr_url is not None
            try:
                cwd = self.workspaces.checkout_of(self.services.repos.get(task.repo_id)) if task.repo_id else None
                state = self.services.vcs.pr_state(task.pr_url, cwd)
            except ServiceError as error:
                log.info("could not check the PR of %s: %s", task.id, error)
                continue
            if state == "merged":
                self.lifecycle.pr_settled(task.id, merged=True)
                self.drop_worktree(task)
                changed.append((task.id, "COMPLETED"))
            elif state == "closed":
                self.lifecycle.pr_settled(task.id, merged=False)
                changed.append((task.id, "BLOCKED"))
        return changed
