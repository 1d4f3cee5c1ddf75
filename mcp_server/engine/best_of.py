"""Best of N, the engine's side (design.md "Best of N"): check each candidate without landing, pick, land the winner.

A candidate's completed run is brought up to date with the default branch in its own worktree and the repo's checks
run there (the merge queue's steps, merge_queue.py), but nothing lands: the outcome (passed, lines changed, or why
not) is a `best_of.checked` event, and the candidate ends COMPLETED (passed) or BLOCKED. After every candidate run
the group is settled: with pick "smallest", once no candidate is in flight, the passing one with the smallest diff
lands; with "first", the first that passed lands at once and the others are stopped. The winner lands as the
merge queue lands (one commit with exactly the checked tree, by compare-and-swap), checked again only when the
default branch moved since its check. The others keep their branches
(their worktrees go) and are shown as not chosen; none passing holds the group BLOCKED with each one's reason.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from ..services import Services, gitops
from ..services.candidates import CHECKED, outcomes, rows
from ..services.errors import ServiceError
from ..services.lifecycle import Lifecycle
from ..services.task_states import CLAIMED
from ..store.models import Repo, Task
from .landing import BranchReads
from .merge_queue import ROUNDS, MergeQueue, abort_merge
from .workspaces import Workspace, Workspaces

log = logging.getLogger("agentqueue.engine")

SETTLED = frozenset({"COMPLETED", "BLOCKED"})  # a candidate whose run (and check) is over


class BestOfN:
    def __init__(self, services: Services, lifecycle: Lifecycle, workspaces: Workspaces, queue: MergeQueue,
                 log_line: Callable[[str, str], None], is_running: Callable[[str], bool]) -> None:
        self.services = services
        self.store = services.store
        self.lifecycle = lifecycle
        self.workspaces = workspaces
        self.queue = queue
        self.log_line = log_line
        self.is_running = is_running  # a run of that task is going on in this engine (its worktree is in use)
        self._deciding = threading.Lock()  # one decision at a time in this daemon (team mode: the repo's lease too)

    # -- a candidate's run ended ---------------------------------------------------------------------
    def check(self, task: Task, workspace: Workspace, read: BranchReads) -> None:
        """A candidate's completed run: its branch brought up to date and checked, nothing landed; it ends
        COMPLETED when it passed, else BLOCKED with why."""
        repo = workspace.repo
        assert repo is not None and workspace.branch is not None and task.candidate_of is not None
        tree = self.workspaces.tree(workspace)
        main = gitops.Checkout(self.workspaces.checkout_of(repo), known=True)
        outcome: dict[str, Any] = {"group": task.candidate_of, "agent_id": task.assigned_agent, "passed": False}
        try:
            checks = self.queue.checks(task, self.queue.declared(task, repo))
            hold = self.queue.landing.holds(task, workspace, read, checks)
            if hold:
                outcome["reason"] = f"it needs a person's review: {hold.reason()}"
            else:
                outcome.update(self._checked(task, workspace, repo, tree, main))
        except ServiceError as error:
            abort_merge(tree)
            outcome["reason"] = f"it could not be checked: {error}"
        self._record(task, outcome)

    def _checked(self, task: Task, workspace: Workspace, repo: Repo, tree: gitops.Checkout,
                 main: gitops.Checkout) -> dict[str, Any]:
        assert workspace.branch is not None
        target = self.queue.target(tree, repo, self.queue.remote(main))
        conflicts = self.queue.update(tree, repo, workspace.branch, target)
        if conflicts:
            abort_merge(tree)
            return {"reason": f"it conflicts with '{repo.default_branch}' in {', '.join(conflicts)}"}
        config = self.queue.declared(task, repo)  # the default branch's checks, never the candidate's own
        failure = self.queue.run_checks(task, workspace, self.queue.checks(task, config),
                                         config.port_env if config else None)
        if failure:
            return {"reason": f"{failure['summary']}: {failure['output']}"}
        tip = tree.run("rev-parse", "--verify", "HEAD")
        lines = lines_changed(tree, target, tip)
        if not lines:  # else the smallest diff would be no work at all
            return {"reason": f"it changed nothing in repo '{repo.id}'"}
        return {"passed": True, "lines": lines, "tip": tip, "target": target}

    def _record(self, task: Task, outcome: dict[str, Any]) -> None:
        """The outcome as a `best_of.checked` event, and the candidate COMPLETED or BLOCKED, in one transaction."""
        with self.store.transaction():
            row = self.services.tasks.require(task.id)
            if row["status"] not in ("IN_PROGRESS", "VERIFYING") or not self.lifecycle.owns(task.id):
                return  # stopped meanwhile
            self.store.add_event(CHECKED, project_id=task.project_id, task_id=task.id, payload=outcome)
            if row["status"] == "IN_PROGRESS":
                self.services.tasks.move(row, "VERIFYING", "agent_completed")
                row = self.services.tasks.require(task.id)
            if outcome["passed"]:
                self.services.tasks.move(row, "COMPLETED", "candidate_passed", {"assigned_agent": None},
                                         details={"lines": outcome["lines"]})
            else:
                self.services.tasks.move(row, "BLOCKED", "candidate_failed", {"assigned_agent": None},
                                         details={"group": task.candidate_of, "error": outcome["reason"]})
        said = f"passed, {outcome['lines']} line(s) changed" if outcome["passed"] else \
            f"did not pass: {outcome['reason']}"
        self.log_line(task.id, f"[best of] candidate of {task.candidate_of}: {said}")

    # -- the group ------------------------------------------------------------------------------------
    def settle(self, group_id: str) -> str | None:
        """After any candidate run: decide the group when its pick allows; the winner's id once one landed."""
        repo_id = self.store.scalar("SELECT repo_id FROM tasks WHERE id = ?", (group_id,))
        if repo_id is None:
            return None  # deleted meanwhile
        # One decision at a time: in this daemon, and in team mode across daemons (the repo's landing lease).
        with self._deciding, self.queue.store_lock(repo_id):
            group = self.store.one("SELECT * FROM tasks WHERE id = ?", (group_id,))
            if group is None:
                return None
            members = rows(self.store, group_id)
            if group["status"] != "DEFINED":
                self._tidy(group, members)
                return group["chosen"]
            checked = outcomes(self.store, [m["id"] for m in members])
            in_flight = [m for m in members if m["status"] not in SETTLED]
            passed = [m for m in members if m["status"] == "COMPLETED" and checked.get(m["id"], {}).get("passed")]
            if group["pick"] == "first":
                passed.sort(key=lambda m: checked[m["id"]]["order"])  # the first to pass
            elif in_flight:
                return None  # "smallest" waits for every candidate
            else:
                passed.sort(key=lambda m: (checked[m["id"]]["lines"], checked[m["id"]]["order"]))
            for member in passed:
                if self._land(member, checked[member["id"]], self.services.repos.get(member["repo_id"])):
                    self._chosen(group, member, checked[member["id"]].get("agent_id"))
                    self._tidy(self.store.one("SELECT * FROM tasks WHERE id = ?", (group_id,)) or group,
                               rows(self.store, group_id))
                    return str(member["id"])
            if not any(m["status"] not in SETTLED for m in rows(self.store, group_id)):
                self._none_passed(group)
            return None

    def _land(self, member: dict[str, Any], checked: dict[str, Any], repo: Repo) -> bool:
        """The winner onto the default branch: exactly its checked commit when the default branch is where it was
        checked on, else brought up to date and checked again (ROUNDS times at most); False, with why recorded,
        when it no longer passes."""
        task = self.services.tasks.get(member["id"])
        workspace = Workspace(self.workspaces.path_for(repo.id, task.id), task.branch, repo)
        if not workspace.path.exists():
            workspace = self.workspaces.prepare(repo, task.id, task.title, task.branch)
        tree = self.workspaces.tree(workspace)
        main = gitops.Checkout(self.workspaces.checkout_of(repo), known=True)
        remote = self.queue.remote(main)
        tip, checked_on = checked.get("tip"), checked.get("target")
        why = f"'{repo.default_branch}' moved during each of {ROUNDS} rounds of checks"
        try:
            for _ in range(ROUNDS):
                target = self.queue.target(tree, repo, remote)
                head = tree.run("rev-parse", "--verify", "HEAD")
                if head != tip or target != checked_on:  # something landed since its check: check it again
                    outcome = self._checked(task, workspace, repo, tree, main)
                    if not outcome.get("passed"):
                        why = f"after '{repo.default_branch}' moved, {outcome['reason']}"
                        break
                    tip, checked_on = outcome["tip"], outcome["target"]
                # One commit on the default branch with exactly the checked tree, as the merge queue lands.
                onto = self.queue.one_commit(tree, repo, task, tip, checked_on)
                if self.queue.move(main, tree, repo, onto, checked_on, remote):
                    with self.store.transaction():
                        self.store.db.execute("UPDATE tasks SET base_sha = ?, landed_sha = ? WHERE id = ?",
                                              (checked_on, onto, task.id))
                    self.workspaces.remove(workspace, True, tip)
                    return True
        except ServiceError as error:
            abort_merge(tree)
            why = f"it could not land: {error}"
        with self.store.transaction():
            self.store.add_event(CHECKED, project_id=task.project_id, task_id=task.id, payload={
                "group": task.candidate_of, "agent_id": checked.get("agent_id"), "passed": False, "reason": why})
            self.services.tasks.move(self.services.tasks.require(task.id), "BLOCKED", "candidate_failed",
                                     details={"group": task.candidate_of, "error": why}, override=True)
        return False

    def _chosen(self, group: dict[str, Any], winner: dict[str, Any], agent_id: str | None) -> None:
        """The group COMPLETED with its winner (and where it landed); candidates still in flight are stopped."""
        landed = self.store.one("SELECT base_sha, landed_sha, branch FROM tasks WHERE id = ?", (winner["id"],)) or {}
        with self.store.transaction():
            row = self.services.tasks.require(group["id"])
            # DEFINED -> COMPLETED is no move a task makes by itself: the group's is the engine's, recorded as such.
            self.services.tasks.move(row, "COMPLETED", "chosen", {
                "chosen": winner["id"], "base_sha": landed.get("base_sha"), "landed_sha": landed.get("landed_sha"),
                "branch": landed.get("branch")}, override=True, details={"chosen": winner["id"]})
            self.store.add_event("best_of.chosen", project_id=group["project_id"], task_id=group["id"],
                                 payload={"chosen": winner["id"], "pick": group["pick"]})
        self.log_line(group["id"], f"[best of] {winner['id']} was chosen and landed")
        try:  # a line in today's project memory, as for any completed task
            self.services.memory.append_today(group["project_id"], (
                f"- {time.strftime('%H:%M')} task {group['id']} \"{group['title']}\" completed: best of "
                f"{group['best_of']}, candidate {winner['id']} ({agent_id or 'an agent'}) landed"))
        except (OSError, ServiceError) as error:
            log.warning("could not write memory for %s: %s", group["id"], error)
        for member in rows(self.store, group["id"]):
            if member["status"] in CLAIMED or member["status"] in ("READY", "DEFINED", "PAUSED"):
                try:
                    self.services.tasks.stop(member["id"])  # kills a running one; its branch keeps what it did
                except ServiceError as error:
                    log.warning("could not stop candidate %s: %s", member["id"], error)

    def _tidy(self, group: dict[str, Any], members: list[dict[str, Any]]) -> None:
        """A decided group's losers: shown as not chosen (COMPLETED, nothing more to do for them), their worktrees
        removed once their run is over, their branches kept for review until a person deletes them."""
        if group["status"] != "COMPLETED":
            return
        for member in members:
            if member["id"] == group["chosen"] or member["status"] in CLAIMED or self.is_running(member["id"]):
                continue  # a stopped run still ending: its own settle tidies it
            if member["status"] != "COMPLETED":
                with self.store.transaction():
                    self.services.tasks.move(self.services.tasks.require(member["id"]), "COMPLETED", "not_chosen",
                                             {"assigned_agent": None}, override=True,
                                             details={"chosen": group["chosen"]})
            if member["branch"] and member["repo_id"]:
                repo = self.services.repos.get(member["repo_id"])
                workspace = Workspace(self.workspaces.path_for(repo.id, member["id"]), member["branch"], repo)
                if workspace.path.exists():
                    try:
                        abort_merge(self.workspaces.tree(workspace))
                        self.workspaces.remove(workspace, delete_branch=False)
                    except ServiceError as error:
                        log.warning("could not remove the worktree of %s: %s", member["id"], error)

    def _none_passed(self, group: dict[str, Any]) -> None:
        """No candidate passed: the group BLOCKED with each one's reason; every branch is kept."""
        members = rows(self.store, group["id"])
        checked = outcomes(self.store, [m["id"] for m in members])
        reasons = [{"task_id": m["id"], "agent_id": checked.get(m["id"], {}).get("agent_id"),
                    "reason": checked.get(m["id"], {}).get("reason") or m["reason"] or m["status"]} for m in members]
        with self.store.transaction():
            row = self.services.tasks.require(group["id"])
            if row["status"] == "DEFINED":
                self.services.tasks.move(row, "BLOCKED", "none_passed", details={"candidates": reasons})
        self.log_line(group["id"], "[best of] no candidate passed: " + "; ".join(
            f"{r['task_id']}: {r['reason']}" for r in reasons))

    def discard(self, task: Task) -> None:
        """delete_task on a candidate: its worktree and its kept branch go (a person asked)."""
        if not task.repo_id or not task.branch:
            return
        repo = self.services.repos.get(task.repo_id)
        workspace = Workspace(self.workspaces.path_for(repo.id, task.id), task.branch, repo)
        main = gitops.Checkout(self.workspaces.checkout_of(repo), known=True)
        try:
            if workspace.path.exists():
                if self.workspaces.before_remove is not None:
                    self.workspaces.before_remove(workspace)  # the repo's teardown, as for any worktree removed
                self.workspaces.discard(workspace)  # what it holds is discarded, asked
            main.run("branch", "-D", "--", task.branch)
        except ServiceError as error:
            log.warning("could not discard the branch of %s: %s", task.id, error)



def lines_changed(tree: gitops.Checkout, base: str, tip: str) -> int:
    """Lines added plus lines removed from `base` to `tip` (a binary file counts as one line)."""
    total = 0
    for line in tree.run("diff", "--numstat", "--no-renames", base, tip).splitlines():
        added, removed, *_ = line.split("\t")
        total += (int(added) if added.isdigit() else 1) + (int(removed) if removed.isdigit() else 0)
    return total

