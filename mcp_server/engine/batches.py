"""Batches in the merge queue (design.md "Batches"): land several queued tasks of a repo at once.

When a repo's `merge_batch` is over 1 and tasks wait behind the one whose turn it is, that task leads a batch of up
to merge_batch of them, in queue order. Their branches are merged one after another onto the default branch's tip
off to the side (merge-tree), and the combined result becomes ONE commit whose first parent is the default branch
and whose other parents are the tasks' tips. The checks run on it in a worktree of the batch's own, and the default
branch moves to it by compare-and-swap only when they pass: so every first-parent commit the queue lands passed
them. When they fail, the batch is bisected: the first half is tried on the default branch; a half that passes
lands, a half that fails is split again, until the culprit is one task, which is sent back to its agent with the
check's output (merge_queue.py's sent-back path); the rest land. A task whose branch conflicts while the batch is
combined is left out: it lands one by one on its own turn (which sends the conflict back).
"""

from __future__ import annotations

import contextlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..services import gitops
from ..services.errors import ServiceError
from ..services.repo_config import RepoConfig
from ..store.models import Repo
from .ignored_files import copy_ignored
from .workspaces import Workspace

if TYPE_CHECKING:
    from .merge_queue import Check, MergeQueue, Queued

log = logging.getLogger("agentqueue.engine")

BATCH_DIR = ".batch"  # the batch's worktree, beside the repo's task worktrees (no task id starts with a dot)
TITLE_SHOWN = 72  # characters of a task's title in the batch commit's message


@dataclass
class _Tried:
    """One try of a group of tasks on the default branch."""

    outcome: str  # "landed", "failed", or "left" (nothing to try, or the default branch moved on every round)
    included: list[Queued]  # the group less the tasks whose branch conflicted while combining
    failure: dict[str, Any] | None = None


class Batches:
    """The batch path of one engine's merge queue; `land` is called on the turn of the task at a queue's head."""

    def __init__(self, queue: MergeQueue) -> None:
        self.queue = queue
        self.services = queue.services
        self.store = queue.store
        self.lifecycle = queue.lifecycle
        self.workspaces = queue.workspaces
        self._waiting: dict[str, Queued] = {}  # the tasks in this engine's queues, by id (the batch's candidates)

    def enter(self, queued: Queued) -> None:
        self._waiting[queued.task.id] = queued

    def leave(self, task_id: str) -> None:
        self._waiting.pop(task_id, None)

    # -- the turn of the task at a queue's head, in a worker thread --------------------------------------
    def land(self, leader: Queued, order: list[str]) -> bool:
        """Land `leader`, in a batch with the tasks waiting behind it when its repo batches; True when its work
        reached the default branch. The tasks the batch settles get `settled`; the others keep their turn."""
        repo = leader.workspace.repo
        assert repo is not None
        try:
            size = self.services.repos.get(repo.id).merge_batch or 1
        except ServiceError:
            size = 1  # the repo is gone: its landing says so, one by one
        members = self._members(leader, order, size) if size > 1 else []
        if len(members) > 1:
            with self.queue.store_lock(repo.id):
                self._land_batch(repo, members)
        if leader.settled is not None:
            return leader.settled
        return self.queue.land(leader)  # one by one: batching off, nothing waiting behind it, or it was left out

    def _members(self, leader: Queued, order: list[str], size: int) -> list[Queued]:
        """The leader and the tasks behind it, in queue order, up to `size`: those still running here whose work
        nothing holds for review (Landing.holds: a held task waits for its own turn, which checks, then holds it).
        None when the leader itself cannot be in a batch."""
        members: list[Queued] = []
        assert leader.workspace.repo is not None
        checks = self.queue.checks(leader.task, self.queue.declared(leader.task, leader.workspace.repo))
        for task_id in list(order):
            queued = self._waiting.get(task_id)
            if queued is None or queued.settled is not None or not self.lifecycle.running(task_id):
                continue
            repo, branch = queued.workspace.repo, queued.workspace.branch
            assert repo is not None and branch is not None
            if self.queue.landing.holds(queued.task, queued.workspace, queued.read, checks):
                continue  # its own turn checks it, then holds it (a held leader: no batch at all)
            members.append(queued)
            if len(members) == size:
                break
        return members if members and members[0] is leader else []

    def _land_batch(self, repo: Repo, members: list[Queued]) -> None:
        ids = [q.task.id for q in members]
        with self.store.transaction():
            for queued in members:
                self.store.add_event("merge_queue.testing", project_id=queued.task.project_id,
                                     task_id=queued.task.id, payload={"repo_id": repo.id,
                                                                      "branch": queued.workspace.branch,
                                                                      "batch": len(members), "tasks": ids})
        for queued in members:
            self.queue.log_line(queued.task.id, f"[merge queue] checked in a batch of {len(members)}: "
                                                f"{', '.join(ids)}")
        run: _Run | None = None
        try:
            run = _Run(self, repo, members)
            run.settle(members, None)
        except ServiceError as error:
            # The tasks not settled yet keep their turns: one by one, which blocks them with the error if it stays.
            log.warning("batch of %d in %s stopped (%s); its unsettled tasks land one by one", len(members), repo.id,
                        error)
        log.info("batch of %d in %s: %d landed, %d sent back, %d left for their turn, %d check run(s)", len(members),
                 repo.id, sum(q.settled is True for q in members), sum(q.settled is False for q in members),
                 sum(q.settled is None for q in members), run.check_runs if run else 0)


class _Run:
    """One batch: its worktree, the checks, and the bisection."""

    def __init__(self, batches: Batches, repo: Repo, members: list[Queued]) -> None:
        self.batches = batches
        self.queue = batches.queue
        self.repo = repo
        self.leader = members[0]
        self.main = gitops.Checkout(batches.workspaces.checkout_of(repo), known=True)
        self.remote = batches.queue.remote(self.main)
        # The repo's declaration on its default branch now: its checks, as one by one, run with the leader's port;
        # its copied files and setup command, applied to the batch worktree as to a task's.
        self.config: RepoConfig | None = self.queue.declared(self.leader.task, repo)
        self.checks: list[Check] = self.queue.checks(self.leader.task, self.config)
        self.path = batches.workspaces.root / repo.id / BATCH_DIR
        self.tree: gitops.Checkout | None = None
        self.tips = {q.task.id: batches.workspaces.tree(q.workspace).run("rev-parse", "--verify", "HEAD")
                     for q in members}
        self.check_runs = 0

    # -- the bisection -----------------------------------------------------------------------------------
    def settle(self, group: list[Queued], failure: dict[str, Any] | None) -> None:
        """Land what of `group` passes, in order, and send back its culprits. `failure`: the group is known to fail
        on the default branch as it is (that check's result), so it is split without being tried again."""
        if failure is None:
            tried = self.try_group(group)
            if tried.outcome != "failed":
                return
            group, failure = tried.included, tried.failure
            assert failure is not None
        if len(group) == 1:
            self.send_back(group[0], failure)
            return
        half = (len(group) + 1) // 2
        first, second = group[:half], group[half:]
        tried = self.try_group(first)
        if tried.outcome == "failed":
            self.settle(tried.included, tried.failure)
            self.settle(second, None)  # unknown on the new default branch: tried
        elif tried.outcome == "landed" and len(tried.included) == len(first):
            self.settle(second, failure)  # the whole failed and its first half passed: the rest fails on top of it
        else:
            self.settle(second, None)

    def try_group(self, group: list[Queued]) -> _Tried:
        """Combine `group` onto the default branch's tip, check it, and land it when the checks pass; when the
        default branch moved meanwhile (the person committed), again from its new tip, as one by one does."""
        from .merge_queue import ROUNDS

        included = group
        for attempt in range(1, ROUNDS + 1):
            target = self.queue.target(self.worktree(), self.repo, self.remote)
            commit, included = self.combine(target, included)
            if commit is None:
                return _Tried("left", [])
            self.checkout(commit)
            self.ready()
            self.check_runs += 1
            workspace = Workspace(self.path, None, self.repo)
            failure = self.queue.run_checks(self.leader.task, workspace, self.checks, self.leader.port_env)
            if failure:
                return _Tried("failed", included, failure)
            if self.queue.move(self.main, self.worktree(), self.repo, commit, target, self.remote):
                self.landed(included, target, commit)
                return _Tried("landed", included)
            log.info("%s of %s moved while a batch was checked (round %d): combining again", self.repo.default_branch,
                     self.repo.id, attempt)
        return _Tried("left", included)

    def combine(self, target: str, group: list[Queued]) -> tuple[str | None, list[Queued]]:
        """ONE commit on `target` holding `group`'s work: each branch merged (merge-tree) onto the running result in
        queue order, then a commit of the result with `target` first and the tips after it. A branch that conflicts
        is left out of the batch. (None, []) when none is left."""
        running, included = target, []
        for queued in group:
            tip = self.tips[queued.task.id]
            tree, conflicts = self.main.merge_tree(running, tip)
            if tree is None:
                self.queue.log_line(queued.task.id, f"[merge queue] left out of the batch: conflicts in "
                                                    f"{', '.join(conflicts)}; it lands on its own turn")
                continue
            # A step commit, so the next branch's merge base counts this one's history; never on any branch.
            running = self.main.run_as_author("commit-tree", tree, "-p", running, "-p", tip, "-m", "batch step")
            included.append(queued)
        if not included:
            return None, []
        default = self.repo.default_branch
        lines = "\n".join(f"- {q.task.id}: {_one_line(q.task.title)}" for q in included)
        parents = [arg for q in included for arg in ("-p", self.tips[q.task.id])]
        commit = self.main.run_as_author("commit-tree", f"{running}^{{tree}}", "-p", target, *parents, "-m",
                                         f"Merge {len(included)} task(s) into {default} (merge queue batch)\n\n"
                                         f"{lines}")
        return commit, included

    # -- outcomes ----------------------------------------------------------------------------------------
    def landed(self, group: list[Queued], target: str, commit: str) -> None:
        """Each task of a landed group COMPLETED with the batch's commit, and an event saying so."""
        ids = [q.task.id for q in group]
        store = self.batches.store
        for queued in group:
            task = queued.task
            queued.landed_tip = self.tips[task.id]
            queued.settled = True  # its work is on the default branch now, whatever happens to the task's row
            try:
                with store.transaction():
                    store.add_event("merge_queue.batch_landed", project_id=task.project_id, task_id=task.id,
                                    payload={"repo_id": self.repo.id, "size": len(group), "commit": commit,
                                             "tasks": ids})
                    self.batches.lifecycle.succeeded(task.id, awaiting_approval=False, landed=(target, commit),
                                                     details={**self.queue.where(queued.workspace),
                                                              "files": len(queued.read.files), "batch": len(group)})
            except ServiceError as error:  # stopped while the batch was checked: its row was moved already
                log.warning("task %s landed in a batch but could not be marked COMPLETED: %s", task.id, error)
            self.queue.log_line(task.id, f"[merge queue] landed in a batch of {len(group)} as {commit[:12]}")

    def send_back(self, culprit: Queued, failure: dict[str, Any]) -> None:
        """The culprit's branch brought up to date in its worktree (as one by one does), then sent back to its agent
        with the check's output, or BLOCKED when its retries are spent (merge_queue.py)."""
        assert culprit.workspace.branch is not None
        tree = self.batches.workspaces.tree(culprit.workspace)
        target = self.queue.target(tree, self.repo, self.remote)
        landed = self.queue.landed_since(tree, target)
        conflicts = self.queue.update(tree, self.repo, culprit.workspace.branch, target)
        self.queue.log_line(culprit.task.id, "[merge queue] the culprit of its batch: the checks fail with its work")
        if conflicts:
            self.queue.conflicted(culprit, tree, target, conflicts, landed)
        else:
            self.queue.check_failed(culprit, failure, landed, target)
        culprit.settled = False

    # -- the batch's worktree ----------------------------------------------------------------------------
    def worktree(self) -> gitops.Checkout:
        """The repo's batch worktree, detached: kept from batch to batch (a CI runner's checkout: no worktree to add
        and remove per batch), made again when it is missing or broken."""
        if self.tree is None:
            if self.path.is_dir():
                try:
                    tree = self.batches.workspaces.tree(Workspace(self.path, None, self.repo))
                    tree.run("rev-parse", "--verify", "HEAD")
                    self.tree = tree
                    return tree
                except ServiceError:
                    pass
            if self.path.exists():  # broken, or a leftover: ours alone, nothing in it to keep
                self._remove()
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.batches.workspaces.worktree_lock(self.repo.id):
                self.main.run("worktree", "add", "--quiet", "--detach", str(self.path),
                              f"refs/heads/{self.repo.default_branch}")
            self.record.unlink(missing_ok=True)  # a new worktree: nothing set up in it yet
            self.tree = self.batches.workspaces.tree(Workspace(self.path, None, self.repo))
        return self.tree

    def checkout(self, commit: str) -> None:
        tree = self.worktree()
        tree.run("checkout", "--quiet", "--detach", "--force", commit)
        tree.run("clean", "-fdq")  # what an earlier check wrote (ignored files stay: a cache, as on a CI runner)
        self.batches.workspaces.expose(Workspace(self.path, None, self.repo))  # what the checks' git sees

    @property
    def record(self) -> Path:
        """Which declaration the batch worktree was made ready for, beside ready.py's records of task worktrees."""
        return self.batches.workspaces.root.parent / "worktree-setup" / self.repo.id / f"{BATCH_DIR}.json"

    def ready(self) -> None:
        """The batch worktree ready as a task's is (ready.py): the ignored files the repo names copied in and its
        setup command run, in the sandbox with the leader's port, once per declaration (a record out of the
        sandbox's reach says which). A failure stops the batch: its tasks land one by one, in their own worktrees."""
        config = self.config
        if config is None or not (config.patterns or config.setup):
            return
        record = self.record
        wanted = {"setup": config.setup, "patterns": list(config.patterns)}
        try:
            if json.loads(record.read_text(encoding="utf-8")) == wanted:
                return
        except (OSError, ValueError):
            pass
        task = self.leader.task
        try:
            copy_ignored(self.main.path, self.path, config.patterns)
        except OSError as error:
            raise ServiceError(f"could not copy the ignored files into the batch worktree: {error}") from None
        if config.setup:
            timeout = int(min(config.setup_timeout, self.queue.check_timeout))
            with self.queue.task_env(task, self.leader.port_env) if self.queue.task_env else \
                    contextlib.nullcontext({}) as env:
                outcome = self.batches.services.files.run(config.setup, self.path, timeout, actor="setup",
                                                          task_id=task.id, env=env)
            self.queue.log_line(task.id, f"[setup] batch worktree: $ {config.setup} -> {outcome.returncode}\n"
                                         f"{outcome.stdout[-4000:]}{outcome.stderr[-4000:]}")
            if outcome.returncode != 0:
                raise ServiceError(f"the setup command `{config.setup}` failed in the batch worktree")
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps(wanted), encoding="utf-8")

    def _remove(self) -> None:
        self.batches.workspaces.discard(Workspace(self.path, None, self.repo))
        self.tree = None


def _one_line(title: str) -> str:
    text = " ".join(title.split())
    return text if len(text) <= TITLE_SHOWN else text[:TITLE_SHOWN - 1] + "…"
