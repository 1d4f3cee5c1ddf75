"""The merge queue (design.md "Merge queue"): landings of a repo that has checks, one at a time, in order.

A completed run's task waits in its repo's queue (VERIFYING). When its turn comes: its branch is brought up to
date with the default branch in its own worktree (a merge, or a rebase when the repo says so), the checks run on
that result inside the sandbox, and the default branch is moved to exactly that tested commit by a
compare-and-swap, only if they passed; when the default branch moved meanwhile (the person committed), it is
updated and checked again. A conflict or a failing check sends the task back to the agent that did the work
(`send_back`), with the conflict hunks or the check's output in its next prompt, up to the project's
merge_retries for each kind (a conflict with work that landed after the agent's last resolution spends none:
services/send_backs.py); then it is BLOCKED as before. The reruns of tasks sent back with conflicts in the same
files run one after another (`held_reruns`), each merging again, just before it starts, what landed while it
waited (`merge_again`). Repos without checks keep the fast path (landing.py), and send conflicts back through
the same `send_back`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

import anyio

from ..services import Services, gitops, send_backs
from ..services.errors import ServiceError
from ..services.lifecycle import Lifecycle
from ..services.projects import DEFAULT_MERGE_RETRIES
from ..services.send_backs import FILES_KEPT, FREE_CONFLICTS
from ..services.repo_config import Check, RepoConfig, RepoConfigError, declaration, declared_checks
from ..store.models import Repo, Task
from .batches import Batches
from .landing import BranchReads, Landing
from .workspaces import _RETRYABLE_PUSH, Workspace, Workspaces

log = logging.getLogger("agentqueue.engine")

CUT = 4000  # characters of conflict hunks, or of a check's output, an agent is told (the rest is counted)
LANDED_SHOWN = 30  # commits that landed on the default branch since the task's branch left it, listed for the agent
ROUNDS = 3  # the default branch moved while the checks ran: update and check again, this many times in all
TURN_POLL = 0.02  # seconds between looks at whose turn it is in a repo's queue
LOCK_WAIT = 3600.0  # seconds a daemon waits for another daemon's landing in the same repo (team mode)


def bounded(text: str, limit: int = CUT) -> str:
    """The last `limit` characters of `text` (where a failure's cause usually is), saying how much was cut."""
    text = text.strip()
    if len(text) <= limit:
        return text
    return f"[… {len(text) - limit} earlier characters cut …]\n{text[-limit:]}"


def _head(text: str, limit: int = CUT) -> str:
    """The first `limit` characters of `text` (conflict hunks read top down), saying how much was cut."""
    text = text.strip()
    return text if len(text) <= limit else f"{text[:limit]}\n[… {len(text) - limit} more characters cut …]"


@dataclass
class Sent:
    """What `send_back` did: sent the task back (true), or not, with why when a cap was reached (`refusal`, a clause
    for the task's reason)."""

    ok: bool
    refusal: str = ""

    def __bool__(self) -> bool:
        return self.ok


@dataclass
class Queued:
    """A completed run waiting in its repo's queue."""

    task: Task
    workspace: Workspace
    read: BranchReads
    agent_id: str
    port_env: str | None = None  # the repo's name for the task's port (.agentqueue.toml), given to its checks too
    landed_tip: str | None = None  # the branch's tip that landed (its worktree and branch are removed after)
    settled: bool | None = None  # landed (True) or sent back (False) by a batch another task led (batches.py)


class MergeQueue:
    def __init__(self, services: Services, lifecycle: Lifecycle, workspaces: Workspaces, landing: Landing,
                 log_line: Callable[[str, str], None], check_timeout: float,
                 task_env: Callable[[Task, str | None], AbstractContextManager[dict[str, str]]] | None = None) -> None:
        self.services = services
        self.store = services.store
        self.lifecycle = lifecycle
        self.workspaces = workspaces
        self.landing = landing
        self.team = services.team
        self.log_line = log_line
        self.check_timeout = int(max(1, min(600, check_timeout)))
        self.task_env = task_env  # the variables carrying a task's port while its checks run (ready.py)
        # Per repo, in this process: the tasks in the order they entered; the first one is landing.
        self._order: dict[str, list[str]] = {}
        self._guard = threading.Lock()
        self.batches = Batches(self)

    def checks(self, task: Task, config: RepoConfig | None) -> list[Check]:
        """What the task's work must pass to land: the repo's declared checks (`config`, its default branch's
        .agentqueue.toml as the run started with it), else the project's verify command; none: the fast path."""
        return declared_checks(config, self.services.projects.get(task.project_id))

    def enter(self, queued: Queued) -> None:
        """The task joins its repo's queue (still VERIFYING: claimed, its checks to come)."""
        repo = queued.workspace.repo
        assert repo is not None
        self.lifecycle.verifying(queued.task.id)
        with self._guard, self.store.transaction():  # the queue's order is the order of these events
            self.store.add_event("merge_queue.entered", project_id=queued.task.project_id, task_id=queued.task.id,
                                 payload={"repo_id": repo.id, "branch": queued.workspace.branch})
            self._order.setdefault(repo.id, []).append(queued.task.id)
            self.batches.enter(queued)

    async def land_in_turn(self, queued: Queued) -> bool:
        """Wait until every task of the repo that entered before this one has landed or gone back, then land;
        True when the work reached the default branch. The wait holds no thread."""
        repo = queued.workspace.repo
        assert repo is not None
        order = self._order[repo.id]
        try:
            while order[0] != queued.task.id and queued.settled is None:
                await anyio.sleep(TURN_POLL)
            # Its turn: it lands, in a batch with the tasks behind it when its repo batches (batches.py), unless a
            # batch led by a task ahead of it settled it already.
            landed = queued.settled if queued.settled is not None else \
                await anyio.to_thread.run_sync(self.batches.land, queued, order)
        finally:
            order.remove(queued.task.id)  # one list operation (atomic): never blocks the event loop on the guard
            self.batches.leave(queued.task.id)
        if landed:  # the cleanup, after the turn: the next task's landing need not wait for it
            await anyio.to_thread.run_sync(self.workspaces.remove, queued.workspace, True, queued.landed_tip)
        return landed

    # -- one landing, in a worker thread, the repo's lane held -----------------------------------------
    def land(self, queued: Queued) -> bool:
        task, workspace = queued.task, queued.workspace
        repo = workspace.repo
        assert repo is not None and workspace.branch is not None
        if not self.lifecycle.running(task.id):
            return False  # stopped while it waited
        with self.store_lock(repo.id):
            if not self.lifecycle.running(task.id):
                return False
            with self.store.transaction():
                self.store.add_event("merge_queue.testing", project_id=task.project_id, task_id=task.id,
                                     payload={"repo_id": repo.id, "branch": workspace.branch})
            try:
                return self._land(queued, repo)
            except ServiceError as error:
                self.lifecycle.blocked(task.id, "merge_failed", {**self.where(workspace), "error": str(error)})
                return False

    def _land(self, queued: Queued, repo: Repo) -> bool:
        task, workspace = queued.task, queued.workspace
        assert workspace.branch is not None
        tree = self.workspaces.tree(workspace)
        main = gitops.Checkout(self.workspaces.checkout_of(repo), known=True)
        remote = self.remote(main)
        checks = self.checks(task, self.declared(task, repo))
        passed = False  # the checks passed in an earlier round (the default branch moved before it could land)
        for attempt in range(1, ROUNDS + 1):
            target = self.target(tree, repo, remote)
            landed = self.landed_since(tree, target)
            conflicts = self.update(tree, repo, workspace.branch, target)
            if conflicts:
                return self.conflicted(queued, tree, target, conflicts, landed, checked=passed)
            failure = self.run_checks(task, workspace, checks, queued.port_env)
            if failure:
                return self.check_failed(queued, failure, landed, target)
            passed = True
            # Work that passes waits for a person when it changes protected paths or the files its checks run,
            # drops lines that landed, or is too large (work that fails is sent back first).
            hold = self.landing.holds(task, workspace, queued.read, checks, base=target)
            if hold:
                self.landing.hold(task, workspace, hold)
                return False
            tested = tree.run("rev-parse", "--verify", "HEAD")
            onto = self.one_commit(tree, repo, task, tested, target)
            if self.move(main, tree, repo, onto, target, remote):
                files = queued.read.files
                self.lifecycle.succeeded(task.id, awaiting_approval=False, landed=(target, onto),
                                         details={**self.where(workspace), "files": len(files)})
                queued.landed_tip = tested
                return True
            log.info("%s of %s moved while %s was checked (round %d): updating and checking again",
                     repo.default_branch, repo.id, task.id, attempt)
        self.lifecycle.blocked(task.id, "merge_failed", {
            **self.where(workspace),
            "error": f"'{repo.default_branch}' moved during each of {ROUNDS} rounds of checks; the branch keeps the "
                     "work, checked on the last one"})
        return False

    @staticmethod
    def one_commit(tree: gitops.Checkout, repo: Repo, task: Task, tested: str, target: str) -> str:
        """What the default branch moves to: one commit on top of `target` whose tree is exactly the tested one, so
        every first-parent commit the queue lands passed the checks (a task's own work-in-progress commits stay on
        the side): a merge of the task's branch (parents: the default branch, then the tested tip), or in a repo
        that rebases a single commit (the tested one itself when the task made one, else its commits squashed)."""
        if tested == target:
            return tested  # nothing new: the default branch stays
        if repo.update_method == "rebase":
            if tree.run("rev-parse", "--verify", f"{tested}^") == target:
                return tested  # one commit, rebased onto the default branch: the tested commit itself
            return tree.run_as_author("commit-tree", f"{tested}^{{tree}}", "-p", target, "-m",
                                      f"{task.title}\n\nAgentQueue task {task.id}")
        return tree.run_as_author("commit-tree", f"{tested}^{{tree}}", "-p", target, "-p", tested, "-m",
                                  f"Merge task {task.id}: {task.title}")

    def remote(self, main: gitops.Checkout) -> bool:
        """Whether landings in the repo of checkout `main` go through its origin (team mode, with an origin)."""
        return self.team.shared and main.remote_url() is not None

    def target(self, tree: gitops.Checkout, repo: Repo, remote: bool) -> str:
        """Where the default branch is now: the local one, or origin's in team mode (fetched)."""
        if remote:
            tracking = f"refs/remotes/origin/{repo.default_branch}"
            tree.run("fetch", "--quiet", "origin", f"+refs/heads/{repo.default_branch}:{tracking}")
            return tree.run("rev-parse", "--verify", tracking)
        return tree.run("rev-parse", "--verify", f"refs/heads/{repo.default_branch}")

    @staticmethod
    def landed_since(tree: gitops.Checkout, target: str) -> tuple[int, str]:
        """(how many, the newest LANDED_SHOWN one-line entries) of the commits on the default branch that the
        task's branch lacks: what landed since it started (or was last brought up to date)."""
        count = int(tree.run("rev-list", "--count", f"HEAD..{target}") or 0)
        lines = tree.run("log", "--oneline", "--no-decorate", f"-{LANDED_SHOWN}", f"HEAD..{target}") if count else ""
        return count, lines

    @staticmethod
    def update(tree: gitops.Checkout, repo: Repo, branch: str, target: str) -> list[str]:
        """Bring the task's branch up to date with `target` in its worktree; the conflicting files, or [] when it
        is (the merge of a conflict is left in progress for the agent)."""
        drop_abandoned_merge(tree)
        try:
            tree.run("merge-base", "--is-ancestor", target, "HEAD")
            return []  # it contains the default branch already
        except ServiceError:
            pass
        if repo.update_method == "rebase":
            try:
                # The identity asked first: a rebase that fails on a missing one stops midway, it cannot be re-run.
                tree.run("rebase", "--quiet", "--end-of-options", target, env=tree.identity_env())
                return []
            except ServiceError:
                try:
                    tree.run("rebase", "--abort")
                except ServiceError:
                    pass
                # A conflict mid-rebase is left to the agent as a merge: one state to resolve, not a commit series.
        return leave_merge(tree, target, repo.default_branch, branch)

    def run_checks(self, task: Task, workspace: Workspace, checks: list[Check],
                    port_env: str | None = None) -> dict[str, Any] | None:
        """The checks on the updated branch in its worktree, inside the sandbox (as a verify command runs), in order
        and with the task's port; the first failure, or None when all passed."""
        with self.task_env(task, port_env) if self.task_env else contextlib.nullcontext({}) as env:
            for check in checks:
                # The verify command keeps its words; a repo's check is named as the repo named it.
                tag, named = ("verify", "verify") if check.name == "verify" else (f"check {check.name}",
                                                                                  f"check '{check.name}'")
                timeout = min(check.timeout, self.check_timeout)
                try:
                    self.workspaces.expose(workspace)  # the checks' git sees the branch brought up to date
                    outcome = self.services.files.run(check.command, workspace.path, timeout, actor="verify",
                                                      task_id=task.id, env=env)
                except ServiceError as error:
                    return {"check": check.command, "summary": f"{named} command `{check.command}` could not run: "
                                                               f"{error}", "output": str(error)}
                self.log_line(task.id, f"[{tag}] $ {check.command} -> {outcome.returncode}\n"
                                       f"{outcome.stdout[-4000:]}{outcome.stderr[-4000:]}")
                if outcome.returncode != 0:
                    how = "timed out" if outcome.timed_out else f"exited {outcome.returncode}"
                    return {"check": check.command, "summary": f"{named} command `{check.command}` {how}",
                            "output": bounded((outcome.stdout or "") + (outcome.stderr or ""))}
        return None

    def declared(self, task: Task, repo: Repo) -> RepoConfig | None:
        """The repo's declaration on its default branch now (the checks that judge the work are never the task
        branch's); a declaration that cannot be read falls back to the project's verify command, and the task
        log says why."""
        try:
            return declaration(repo, self.workspaces.checkout_of(repo))
        except RepoConfigError as error:
            self.log_line(task.id, f"[repo_config] {error}")
            return None

    def move(self, main: gitops.Checkout, tree: gitops.Checkout, repo: Repo, new: str, target: str,
              remote: bool) -> bool:
        """The default branch to exactly `new` if it is still at `target`; False when it moved meanwhile."""
        default = repo.default_branch
        if remote:
            try:
                tree.run("push", "--quiet", "origin", f"{new}:refs/heads/{default}")  # never forced
            except ServiceError as error:
                if any(mark in str(error) for mark in _RETRYABLE_PUSH):
                    return False
                raise
            self.workspaces.follow_remote(main, default, new)
            return True
        moved = self.workspaces.compare_and_swap(repo, main, new, target)
        if moved and repo.source_type == "clone" and main.remote_url() is not None:
            main.push(default)
        return moved

    # -- sending work back -------------------------------------------------------------------------------
    def conflicted(self, queued: Queued, tree: gitops.Checkout, target: str, conflicts: list[str],
                   landed: tuple[int, str], checked: bool = False) -> bool:
        task, workspace = queued.task, queued.workspace
        repo = workspace.repo
        assert repo is not None
        hunks = _head(tree.run("diff", "--no-color"))
        facts = self.conflict_facts(tree, target, conflicts)
        if checked:
            facts["checked"] = True  # its checks passed on this work before the default branch moved
        sent = self.send_back(task, queued.agent_id, "conflict", facts, _conflict_text(
            repo.default_branch, workspace.branch or "", conflicts, hunks, landed), tree)
        if not sent:
            abort_merge(tree)
            self.lifecycle.blocked(task.id, "merge_conflict", {
                **self.where(workspace), "conflicts": conflicts, "refusal": sent.refusal,
                "message": f"The task branch conflicts with '{repo.default_branch}' in {', '.join(conflicts)}; "
                           "the merge was aborted and the branch kept for you to resolve."})
        return False

    def check_failed(self, queued: Queued, failure: dict[str, Any], landed: tuple[int, str],
                     target: str | None = None) -> bool:
        task, workspace = queued.task, queued.workspace
        repo = workspace.repo
        assert repo is not None
        message = f"{failure['summary']}:\n{failure['output']}"
        result_id = self.lifecycle.check_failed(task.id, message)
        facts: dict[str, Any] = {"check": failure["check"], "result_id": result_id}
        if target is not None:  # the default branch's commit merged into the branch (the checks ran on it)
            tree = self.workspaces.tree(workspace)
            facts |= {"target": target, "touched": touched(tree, target)}
        sent = self.send_back(task, queued.agent_id, "check", facts, _check_text(
            repo.default_branch, failure, landed))
        if not sent:
            self.lifecycle.blocked(task.id, "verify_failed", details={
                "error_type": "verify_failed", "error_message": message, "agent_type": None})
        return False

    def send_back(self, task: Task, agent_id: str | None, kind: str, facts: dict[str, Any], told: str,
                  tree: gitops.Checkout | None = None) -> Sent:
        """Requeue the task to `agent_id` on its branch with `told` in its next prompt, while its caps allow (not
        when a cap is reached: the caller blocks it). Each kind has its cap (services/send_backs.py): a failing
        check and a conflict without a new resolution (or markers left) each up to the project's merge_retries; a
        conflict with work that landed after the agent's last resolution (`tree`: the worktree, mid-merge, whose
        branch holds it or not), or the first one, spends none, up to FREE_CONFLICTS."""
        project = self.services.projects.get(task.project_id)
        cap = DEFAULT_MERGE_RETRIES if project.merge_retries is None else project.merge_retries
        if cap <= 0:
            return Sent(False, "merge_retries is 0 for its project: the merge queue sends nothing back")
        counted = send_backs.count(self.store, task.id)
        spends: str | None
        if kind == "check":
            spends, done, limit = "check", counted.check, cap
        elif kind == "conflict" and resolved(counted, tree):
            spends, done, limit = None, counted.free, FREE_CONFLICTS
        else:
            spends, done, limit = "conflict", counted.conflict, cap
        if done >= limit:
            return Sent(False, _refusal(spends, limit))
        repo = self.services.repos.get(task.repo_id) if task.repo_id else None
        header = _header(spends, done + 1, limit, repo.default_branch if repo else "the default branch")
        runs = int(self.store.scalar("SELECT count(*) FROM task_results WHERE task_id = ?", (task.id,)) or 0)
        payload = {"kind": kind, **facts, "attempt": done + 1, "cap": limit, "spends": spends, "agent_id": agent_id,
                   "runs": runs}
        self.log_line(task.id, f"[merge queue] sent back to {agent_id or 'any agent'} ({kind}), "
                               + (f"{done + 1} of {limit}" if spends else
                                  f"no retry spent (a conflict with work that landed since its last resolution; "
                                  f"{done + 1} of {limit} such)"))
        sent = self.lifecycle.send_back(task.id, agent_id, header + told, payload)
        if sent and kind == "conflict" and task.repo_id:
            waits = send_backs.held_reruns(self.store, task.repo_id).get(task.id)
            if waits:
                self.log_line(task.id, f"[merge queue] its rerun waits for the rerun of {', '.join(waits)} (the same "
                                       "files), then merges what landed meanwhile")
        return Sent(sent)

    def merge_again(self, task: Task, workspace: Workspace) -> None:
        """Just before the rerun of a task sent back with a conflict: when the default branch moved while the rerun
        waited (another task's rerun on the same files landed), the merge left in its worktree is done again on the
        default branch's tip and what its agent is told written anew, so it resolves once, against everything that
        landed. Nothing when a run came since the send-back (the worktree is as that run left it) or nothing moved."""
        repo = workspace.repo
        if repo is None or workspace.branch is None:
            return
        sends = send_backs.since_reset(self.store, task.id)
        last = sends[-1] if sends else None
        if not last or last.get("kind") != "conflict" or "runs" not in last:
            return
        runs = int(self.store.scalar("SELECT count(*) FROM task_results WHERE task_id = ?", (task.id,)) or 0)
        if runs != last["runs"]:
            return
        tree = self.workspaces.tree(workspace)
        try:
            merging = tree.run("rev-parse", "--verify", "--quiet", "MERGE_HEAD")
        except ServiceError:
            return  # no merge in progress: nothing of the queue's to do again
        main = gitops.Checkout(self.workspaces.checkout_of(repo), known=True)
        try:
            target = self.target(tree, repo, self.remote(main))
        except ServiceError as error:
            log.warning("could not read '%s' before the rerun of %s: %s", repo.default_branch, task.id, error)
            return
        if not merging or merging == target:
            return
        try:
            abort_merge(tree)
            landed = self.landed_since(tree, target)
            conflicts = leave_merge(tree, target, repo.default_branch, workspace.branch)
        except ServiceError as error:
            log.warning("could not merge '%s' into %s again before its rerun: %s", repo.default_branch, task.id, error)
            return
        finally:
            self.workspaces.expose(workspace)  # the run's repository as the daemon's worktree now is
        header = _header(last.get("spends"), int(last.get("attempt") or 1), int(last.get("cap") or 1),
                         repo.default_branch)
        again = (f"'{repo.default_branch}' moved while your rerun waited (another task's rerun on the same files "
                 "landed), so the merge was done again on its newest commit just before this run.\n")
        if conflicts:
            told = _conflict_text(repo.default_branch, workspace.branch, conflicts,
                                  _head(tree.run("diff", "--no-color")), landed)
        else:
            told = (f"The merge of '{repo.default_branch}' into your branch went through without a conflict this "
                    "time and is committed on it. Check that the work still does what the task asks, and end your "
                    "run.\n" + _landed_section(repo.default_branch, landed))
        self.lifecycle.retold(task.id, header + again + told, {"repo_id": repo.id, "target": target,
                                                                "conflicts": conflicts})
        self.log_line(task.id, f"[merge queue] merged '{repo.default_branch}' again before the rerun "
                               f"({landed[0]} commit(s) landed since the branch last took it in)"
                               + (f"; conflicts in {', '.join(conflicts)}" if conflicts else "; no conflict"))

    def send_back_conflict(self, task: Task, workspace: Workspace) -> bool:
        """The fast path (no checks) found a conflict: leave the merge of the default branch in progress in the
        task's worktree and send the task back to its agent; BLOCKED here when a cap is reached. True when the task
        was settled so (sent back or held), False (the worktree as it was) when the merge went through after all or
        it could not be sent back (the caller holds it as before)."""
        repo = workspace.repo
        assert repo is not None and workspace.branch is not None
        tree = self.workspaces.tree(workspace)
        main = gitops.Checkout(self.workspaces.checkout_of(repo), known=True)
        try:
            target = self.target(tree, repo, self.remote(main))
            landed = self.landed_since(tree, target)
            conflicts = leave_merge(tree, target, repo.default_branch, workspace.branch)
            if not conflicts:
                return False
            told = _conflict_text(repo.default_branch, workspace.branch, conflicts,
                                  _head(tree.run("diff", "--no-color")), landed)
            sent = self.send_back(task, task.assigned_agent, "conflict", self.conflict_facts(tree, target, conflicts),
                                  told, tree)
            if sent:
                return True
            if sent.refusal:
                abort_merge(tree)
                self.lifecycle.blocked(task.id, "merge_conflict", {
                    **self.where(workspace), "conflicts": conflicts, "refusal": sent.refusal,
                    "message": f"The task branch conflicts with '{repo.default_branch}' in {', '.join(conflicts)}; "
                               "the merge was aborted and the branch kept for you to resolve."})
                return True
        except ServiceError as error:
            log.warning("could not send %s back with its conflict: %s", task.id, error)
        abort_merge(tree)
        return False

    @staticmethod
    def conflict_facts(tree: gitops.Checkout, target: str, conflicts: list[str]) -> dict[str, Any]:
        """What a conflict's send-back records: the files, and where the branch stood apart from the default branch
        (`tip`, its commit before the merge left in progress, and `fork`, their merge base), so its landing can
        tell whether the resolution dropped what landed since (land_guards.dropped_lines)."""
        tip = tree.run("rev-parse", "--verify", "HEAD")  # mid-merge, HEAD is still the branch's own commit
        # `target`, the default branch's commit it was given to merge (a rerun that resolves it has it), and what the
        # branch changes (`touched`: the reruns of tasks sharing files run one after another, send_backs.py).
        return {"conflicts": conflicts, "tip": tip, "fork": tree.run("merge-base", tip, target), "target": target,
                "touched": touched(tree, target)}

    def where(self, workspace: Workspace) -> dict[str, Any]:
        repo = workspace.repo
        assert repo is not None
        return {"repo_id": repo.id, "branch": workspace.branch, "default_branch": repo.default_branch,
                "checkout": str(self.workspaces.checkout_of(repo))}

    # -- team mode ---------------------------------------------------------------------------------------
    @contextmanager
    def store_lock(self, repo_id: str) -> Iterator[None]:
        """Team mode: one landing with checks per repo at a time across the daemons, by a lease in the store held
        by a live daemon (a dead one's lapses with its lease). One daemon: its lanes are enough."""
        if not self.store.shared:
            yield
            return
        key = f"merge_queue.lock:{repo_id}"
        deadline = time.monotonic() + LOCK_WAIT
        while not self._try_lock(key):
            if time.monotonic() > deadline:
                raise ServiceError(f"Another daemon has been landing in repo '{repo_id}' for over {LOCK_WAIT:.0f} s; "
                                   "the task branch keeps the work. restart_task lands it later.")
            time.sleep(0.2)
        try:
            yield
        finally:
            with self.store.transaction():
                if self.store.get_setting(key) == self.team.id:
                    self.store.set_setting(key, "")

    def _try_lock(self, key: str) -> bool:
        with self.store.transaction():  # every write transaction is serialised across daemons (postgres.py)
            holder = self.store.get_setting(key)
            if holder and holder != self.team.id and self.store.scalar(
                    "SELECT 1 FROM daemons WHERE id = ? AND lease_until >= ?", (holder, self.store.clock())):
                return False
            self.store.set_setting(key, self.team.id)
            return True


def resolved(counted: send_backs.SendBacks, tree: gitops.Checkout | None) -> bool:
    """Whether a conflict found now follows a new resolution by the agent: it is the task's first send-back (its
    branch left the default branch before that work landed), or its branch holds the default branch's commit the
    last send-back gave it to merge (its run resolved and committed that merge)."""
    if counted.total == 0:
        return True
    given = counted.given
    if given is None or tree is None:
        return False
    try:
        tree.run("merge-base", "--is-ancestor", given, "HEAD")  # mid-merge, HEAD is the branch's own commit
        return True
    except ServiceError:
        return False


def touched(tree: gitops.Checkout, target: str) -> list[str]:
    """The files the worktree's branch changes since it left `target`'s line (the first FILES_KEPT)."""
    try:
        return tree.run("diff", "--name-only", "--no-renames", f"{target}...HEAD").splitlines()[:FILES_KEPT]
    except ServiceError:
        return []


def _header(spends: str | None, n: int, cap: int, default: str) -> str:
    """The first line of what a task sent back is told: which send-back this is, against which cap."""
    then = "Fix it in this worktree and end your run; it is checked and landed again after you.\n"
    if spends is None:
        return (f"Sent back for a conflict with work that landed on '{default}' after your branch last took it in: "
                f"this spends none of the task's send-backs ({n} of at most {cap} such). {then}")
    why = "for a failing check" if spends == "check" else "without a new resolution of the conflict"
    return f"Sent back {n} of {cap} time(s) {why}: the merge queue could not land this task's work. {then}"


def _refusal(spends: str | None, cap: int) -> str:
    """Why the queue sends the task back no more: a clause for its reason."""
    if spends is None:
        return (f"it was sent back {cap} times for conflicts with work that landed meanwhile, the most the merge "
                "queue sends back for those")
    if spends == "check":
        return f"its checks failed after each of its {cap} send-back(s) for them (the project's merge_retries)"
    return (f"its agent brought no new resolution of the conflict in {cap} send-back(s) (the project's "
            "merge_retries caps those; a conflict with work that landed after a resolution spends none)")


def leave_merge(tree: gitops.Checkout, target: str, default: str, branch: str) -> list[str]:
    """Merge `target` into the worktree's branch; on a conflict leave the merge in progress (markers in the files,
    MERGE_HEAD set) and return the conflicting files."""
    drop_abandoned_merge(tree)
    try:
        tree.run_as_author("merge", "--no-edit", "--quiet", "-m", f"Merge branch '{default}' into {branch}",
                           "--end-of-options", target)
        return []
    except ServiceError as error:
        conflicts = tree.run("diff", "--name-only", "--diff-filter=U").splitlines()
        if conflicts:
            return conflicts
        abort_merge(tree)
        raise ServiceError(f"Could not merge '{default}' into '{branch}': {error}") from None


def drop_abandoned_merge(tree: gitops.Checkout) -> None:
    """A merge the queue left for the agent that its run did not conclude (its own git aborted it: the run's
    repository is its own, so the daemon's still has MERGE_HEAD, and AgentQueue found nothing to commit): aborted
    here too, so the branch is as the run left it and can be brought up to date again."""
    try:
        tree.run("rev-parse", "--verify", "--quiet", "MERGE_HEAD")
    except ServiceError:
        return
    abort_merge(tree)


def abort_merge(tree: gitops.Checkout) -> None:
    """Leave the worktree as its branch has it (a task that is BLOCKED, not sent back, is never left mid-merge)."""
    try:
        tree.run("merge", "--abort")
    except ServiceError:
        pass


def unresolved(tree: gitops.Checkout, default: str) -> list[str]:
    """Files a run left conflicted: unmerged paths, or conflict markers in lines its branch adds."""
    files = tree.run("diff", "--name-only", "--diff-filter=U").splitlines()
    if files:
        return files
    marked: list[str] = []
    current = ""
    for line in tree.run("diff", "--no-color", "-U0", f"refs/heads/{default}...HEAD").splitlines():
        if line.startswith("+++ "):
            current = line[6:] if line.startswith("+++ b/") else line[4:]
        elif line.startswith(("+<<<<<<< ", "+>>>>>>> ")) or line in ("+<<<<<<<", "+>>>>>>>"):
            if current not in marked:
                marked.append(current)
    return marked


def _landed_section(default: str, landed: tuple[int, str]) -> str:
    count, lines = landed
    if not count:
        return ""
    more = f" (the newest {LANDED_SHOWN} shown)" if count > LANDED_SHOWN else ""
    return f"\n### Commits that landed on '{default}' since your branch left it: {count}{more}\n{lines}\n"


def _conflict_text(default: str, branch: str, conflicts: list[str], hunks: str, landed: tuple[int, str]) -> str:
    return (f"Your branch '{branch}' conflicts with '{default}' in {', '.join(conflicts)}. The merge of '{default}' "
            "into your branch is in progress in this worktree: the conflict markers are in those files and "
            "MERGE_HEAD is set. Resolve every conflict keeping what both sides meant, remove every marker, then "
            "`git add` the files and `git commit` (or leave them resolved: AgentQueue commits them). Do not abort "
            "the merge. Work still conflicted or with markers in it is sent back again.\n"
            f"\n### The conflicts (git diff)\n```diff\n{hunks}\n```\n" + _landed_section(default, landed))


def _check_text(default: str, failure: dict[str, Any], landed: tuple[int, str]) -> str:
    return (f"With '{default}' merged into your branch (that merge is committed on it), the repo's check failed: "
            f"{failure['summary']}. Make it pass, run `{failure['check']}` yourself to see, and commit.\n"
            f"\n### Its output\n```\n{failure['output']}\n```\n" + _landed_section(default, landed))


def unresolved_told(default: str, files: list[str]) -> str:
    return (f"Your last run ended with conflicts still unresolved in {', '.join(files)} (unmerged paths, or "
            "conflict markers such as `<<<<<<<` and `>>>>>>>` in lines your branch adds). Resolve them keeping "
            f"what both sides meant, remove every marker, and commit. '{default}' is already merged into your "
            "branch.\n")
