"""Task workspaces: a git worktree per task on `<task_id>/<slug>`, and landing its work afterwards.

Landing never loses work and never leaves a repo mid-merge: leftovers are committed on the task
branch, the landed commit is built off to the side (the task's tip when it contains the default
branch, else a merge of the default branch into it by `merge-tree` and `commit-tree`: no worktree,
index or ref is touched, and a conflict changes nothing), and only then is the default branch moved
to it, under the repo's lock, if it is still where the commit was built from (a compare-and-swap;
when another landing moved it meanwhile, the commit is built again from its new tip). The user's
checkout is touched only by that move, a fast-forward git refuses rather than overwrite uncommitted
changes. Worktrees are removed after landing, and never while they hold uncommitted work. Runs of
one repo end in parallel threads; only the move of the default branch is serialised per repo.

Team mode (several daemons on one queue, maybe on several machines): each daemon works in its own
checkout of a repo (`checkouts_root`), and lands *through origin*: fetch, merge origin's default
branch into the task branch, push the result as a fast-forward (never forced), and on a rejection
because another daemon pushed first, fetch and try again. Origin is the only shared truth.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import logging
import os
import re
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..services import gitops
from ..services.errors import ConflictError, ServiceError
from ..store.models import Repo
from . import generated, run_repo
from .run_repo import Place

log = logging.getLogger("agentqueue.workspaces")

# Landing locally: how many times to build the landed commit again when the default branch moved meanwhile.
LAND_ATTEMPTS = 20
# Pauses before each try of the careful add that git failed on another worktree's entry, read mid-write.
WORKTREE_RETRY_PAUSES = (0.0, 0.05, 0.1, 0.2)
MAINTAIN_EVERY = 50  # landings in a repo between two runs of git's automatic maintenance there
_MAINTENANCE = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentqueue-git-maintenance")


def _lowered() -> None:
    """A removal thread runs below the daemon (Linux sets a niceness per thread): the starts and landings people
    wait for go first on busy cores."""
    with contextlib.suppress(OSError, AttributeError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), gitops.BACKGROUND_NICE)


# Removed worktrees' folders, renamed out of the way first, are deleted here: off the landing's path.
_REMOVALS = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentqueue-removal",
                                                  initializer=_lowered)
# Landing through origin: how many times to fetch, merge and push before giving up on a busy remote.
PUSH_ATTEMPTS = 5
# Push refusals that mean "someone else moved the ref first": fetch, merge and retry. The lock ones are a
# concurrent push holding the remote's ref lock at that instant.
_RETRYABLE_PUSH = ("[rejected]", "fetch first", "non-fast-forward", "cannot lock ref", "failed to lock",
                   "incorrect old value")


def branch_name(task_id: str, title: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:40].rstrip("-") or "task"
    return f"{task_id}/{slug}"


@dataclass
class Workspace:
    path: Path
    branch: str | None = None
    repo: Repo | None = None
    # Checked out fresh from the default branch by this prepare: nothing in it can differ from the default yet.
    fresh: bool = False


@dataclass
class Landing:
    merged: bool
    sha: str | None = None
    base_sha: str | None = None
    pushed: bool = False
    conflicts: list[str] = field(default_factory=list)
    files_changed: list[str] = field(default_factory=list)
    message: str | None = None
    # Files the task changes that have uncommitted edits in the user's checkout (why git refused to move it).
    dirty: list[str] = field(default_factory=list)
    # The task branch's tip that landed (its branch may be deleted only while it is still there).
    tip: str | None = None
    # Rounds a landing took (1 = the default branch, or origin's, had not moved meanwhile).
    attempts: int = 1


@dataclass
class Tips:
    """Where the default branch (`old`) and the task branch (`tip`) are, read together in one `rev-parse`."""

    seen: int  # this process's count of moves of the default branch, read before `old`
    old: str
    tip: str
    base: str  # `old` (a fast-forward), `tip` (nothing new to land) or "merge"
    # The repository's hooks folder as `rev-parse --git-path hooks` gave it in the task's worktree (core.hooksPath
    # resolved by git, else its own hooks folder), read in the same command; None when not asked for.
    hooks: str | None = None


_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


class Workspaces:
    def __init__(self, worktrees_root: Path, checkouts_root: Path | None = None) -> None:
        self.root = worktrees_root
        # Team mode: this daemon's own checkouts of clone repos, in its home (None: use each repo's checkout_path).
        self.checkouts_root = checkouts_root
        self._locks: dict[str, threading.RLock] = {}
        self._tree_locks: dict[str, threading.Lock] = {}
        # Per repo: how many times this process's landings moved the default branch, and where the last one put it
        # (written under the repo's lock). A landing that sees the count change knows the branch moved without
        # trying a move git would refuse; the compare-and-swap stays the guard against every other writer.
        self._moves: dict[str, tuple[int, str]] = {}
        self._locks_guard = threading.Lock()
        self._commons: dict[Path, Path] = {}  # a checkout's path -> its repository's git folder
        self._exposed: dict[Path, str] = {}  # a worktree -> the commit its run's repository was written at
        # Worktrees whose run's commits were taken since their repository was last written for a run: nothing can have
        # run there since (every run, check and setup is preceded by `expose`), so there is nothing more to take.
        self._collected: set[Path] = set()
        # Worktrees whose leftovers the daemon committed after their run, whose run's repository is still the one the
        # run left: written anew (settle) before the worktree is kept for a person, skipped when it is removed at once.
        self._stale: set[Path] = set()
        self.on_note: Callable[[Path, str], None] | None = None  # a line for the log of the task a worktree is for
        self._repo_commons: dict[str, Path] = {}  # a repo's id -> its git folder, once a worktree of it was placed
        # Called with a task's worktree before it is removed (the repo's teardown command: engine/ready.py).
        self.before_remove: Callable[[Workspace], None] | None = None

    def checkout_of(self, repo: Repo) -> Path:
        """The checkout this daemon works in for `repo`; in team mode a clone repo is cloned on first use."""
        if self.checkouts_root is None:
            return Path(repo.checkout_path)
        if not repo.url:  # link / init: a path on some machine, usable only where it exists
            path = Path(repo.checkout_path)
            if not path.is_dir():
                raise ServiceError(f"Repo '{repo.id}' is not on this machine ({path}); a daemon that has it must "
                                   "run its tasks, or give the repo a url (source=clone) so every daemon can.")
            return path
        own = Path(repo.checkout_path)
        # A checkout inside this daemon's home is its own (it registered the repo); others clone theirs here.
        path = own if _inside(own, self.checkouts_root.parent) else self.checkouts_root / repo.id
        if (path / ".git").exists():
            return path
        with self.repo_lock(repo.id):
            if not (path / ".git").exists():
                self._clone(repo, path)
        return path

    @staticmethod
    def _clone(repo: Repo, path: Path) -> None:
        """Clone beside `path` and rename into place, so a crash mid-clone never leaves a half checkout there."""
        assert repo.url is not None
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.cloning")
        shutil.rmtree(partial, ignore_errors=True)  # a crashed clone of our own
        log.info("cloning %s into %s", repo.url, path)
        gitops.clone(repo.url, partial)
        os.replace(partial, path)

    def has_repo(self, repo: Repo) -> bool:
        """Can this daemon work on `repo`: a clone repo anywhere (it clones), a local path only where it exists."""
        if self.checkouts_root is not None and repo.url:
            return True
        return Path(repo.checkout_path).is_dir()

    def repo_lock(self, repo_id: str) -> threading.RLock:
        """Held while git changes a repo's main checkout, branches or worktree list."""
        with self._locks_guard:
            return self._locks.setdefault(repo_id, threading.RLock())

    def worktree_lock(self, repo_id: str) -> threading.Lock:
        """Held while git prunes a worktree of the repo, adds or removes one on the careful path or a second try, or
        deletes a branch by `branch -d`: each of these reads every worktree's entry and fails on one that another
        is still writing. The usual add and remove run without it and fall back to it. No landing waits on it."""
        with self._locks_guard:
            return self._tree_locks.setdefault(repo_id, threading.Lock())

    def path_for(self, repo_id: str, task_id: str) -> Path:
        return self.root / repo_id / task_id

    # -- the daemon's view of a worktree, and the run's own repository (engine/run_repo.py) ------------------------
    def common_dir(self, main: gitops.Checkout) -> Path:
        """The git folder of a repository's checkout (the person's or the daemon's own: never a task's worktree)."""
        known = self._commons.get(main.path)
        if known is None:
            dot_git = main.path / ".git"
            known = dot_git if dot_git.is_dir() else Path(main.run("rev-parse", "--path-format=absolute",
                                                                    "--git-common-dir"))
            self._commons[main.path] = known
        return known

    def place(self, workspace: Workspace) -> Place:
        """Where git keeps the task's worktree in its repository, found from the repository's side: its folder under
        `worktrees/` whose `gitdir` names this worktree (nothing in the worktree is read)."""
        assert workspace.repo is not None
        common = self.common_dir(gitops.Checkout(self.checkout_of(workspace.repo), known=True))
        admin = admin_of(common, workspace.path)
        self._repo_commons[workspace.repo.id] = common
        if admin is None:
            raise ServiceError(f"The worktree {workspace.path} is no longer registered in repo "
                               f"'{workspace.repo.id}' ({common}); its work is on the task branch "
                               f"'{workspace.branch}'. Run the task again to start a fresh worktree.")
        return Place(workspace.path, admin, common)

    def objects_for(self, workdir: Path) -> Path | None:
        """The objects folder of the repository whose task worktree `workdir` is (the sandbox shows it read-only),
        known from the daemon's own placing of that worktree; None for any other folder."""
        if workdir.parent.parent != self.root:
            return None
        common = self._repo_commons.get(workdir.parent.name)
        return common / "objects" if common is not None else None

    def tree(self, workspace: Workspace) -> gitops.Checkout:
        """The task's worktree as the daemon's git sees it: its own HEAD, index and merge state in the repository, the
        files in the worktree; whatever a run wrote at `<worktree>/.git` plays no part."""
        return gitops.Checkout(workspace.path, git_dir=self.place(workspace).admin)

    def expose(self, workspace: Workspace) -> None:
        """Before anything runs in the worktree (the agent, setup, checks): the run's own repository, written anew."""
        if workspace.repo is None:
            return
        place = self.place(workspace)
        aside = self.root / f".removed-git-{workspace.path.name}-{os.getpid()}-{time.monotonic_ns()}"
        tip, moved = run_repo.expose(gitops.Checkout(workspace.path, git_dir=place.admin), place, workspace.branch,
                                     workspace.repo.default_branch, aside)
        self._exposed[workspace.path] = tip
        self._collected.discard(workspace.path)
        self._stale.discard(workspace.path)
        if moved is not None:
            _REMOVALS.submit(shutil.rmtree, moved, ignore_errors=True)  # off the run's path, below the daemon

    def collect(self, workspace: Workspace, task_id: str) -> str | None:
        """After a run: its commits on the task branch taken in (as from a hostile remote); the new tip, or None."""
        if workspace.repo is None or workspace.branch is None or workspace.path in self._collected:
            return None
        place = self.place(workspace)
        tree = gitops.Checkout(workspace.path, git_dir=place.admin)
        # What the run was shown (it moved its ref from there if it committed), else the daemon's branch as it is.
        ours = self._exposed.get(workspace.path) or tree.run("rev-parse", "--verify", f"refs/heads/{workspace.branch}")
        main = gitops.Checkout(self.checkout_of(workspace.repo), known=True)
        taken = run_repo.collect(tree, main, place, workspace.branch, ours, self.worktree_lock(workspace.repo.id))
        if taken is not None:
            log.info("took the commits of the run of %s (%s)", task_id, taken[:12])
            self._exposed[workspace.path] = taken
        self._collected.add(workspace.path)
        return taken

    def prepare(self, repo: Repo, task_id: str, title: str, existing_branch: str | None = None) -> Workspace:
        """Create (or reuse, on a retry) the task's worktree from the freshly updated default branch, with the run's
        own repository written anew in it."""
        workspace = self._worktree(repo, task_id, title, existing_branch)
        self.expose(workspace)
        return workspace

    def _worktree(self, repo: Repo, task_id: str, title: str, existing_branch: str | None) -> Workspace:
        main = gitops.Checkout(self.checkout_of(repo), known=True)
        if repo.source_type == "clone":
            with self.repo_lock(repo.id):  # it may move the default branch
                self.refresh_default(main, repo)
        branch = existing_branch or branch_name(task_id, title)
        path = self.path_for(repo.id, task_id)
        if path.is_dir() and admin_of(self.common_dir(main), path) is not None:
            return Workspace(path, branch, repo)  # a retry keeps the earlier attempt's commits (and files)
        if os.path.lexists(path):  # a worktree its repository no longer lists: kept aside, never reused
            aside = path.with_name(f"{path.name}.orphan-{int(time.time())}")
            log.warning("worktree %s is not registered in repo %s any more: moved to %s", path, repo.id, aside)
            os.replace(path, aside)
        path.parent.mkdir(parents=True, exist_ok=True)
        if existing_branch is None:
            # The usual case, in one command and without a lock (git creates the new branch atomically, the worktree's
            # folder is the task's own, and git marks a worktree it is still writing as locked, so a prune never takes
            # it). When that branch exists already, a stale worktree entry is in the way, or git met another add or
            # remove mid-write, the careful path below decides under the locks.
            try:
                main.run("worktree", "add", "--quiet", "-b", branch, str(path), repo.default_branch)
                return Workspace(path, branch, repo, fresh=True)
            except ServiceError:
                pass
        with self.repo_lock(repo.id), self.worktree_lock(repo.id):
            for pause in WORKTREE_RETRY_PAUSES:
                time.sleep(pause)
                try:
                    return self._prepare(main, repo, path, branch, existing_branch)
                except gitops.GitError as error:  # another task's unlocked add was mid-write: a matter of milliseconds
                    if "/worktrees/" not in str(error) or os.path.lexists(path):
                        raise
            return self._prepare(main, repo, path, branch, existing_branch)

    def _prepare(self, main: gitops.Checkout, repo: Repo, path: Path, branch: str,
                 existing_branch: str | None) -> Workspace:
        main.run("worktree", "prune")
        if self.checkouts_root is not None and existing_branch is not None and not main.branch_exists(branch):
            self._fetch_published(main, branch)  # team mode: another daemon may have run (and published) it
        merged = main.branch_exists(branch) and self._merged(main, branch, repo.default_branch)
        if existing_branch is None and main.branch_exists(branch) and not merged:
            # A branch the task no longer claims (request_changes after its PR was squash-merged): never
            # rewrite a published branch, start a new one.
            branch = next(f"{branch}-{n}" for n in range(2, 1000) if not main.branch_exists(f"{branch}-{n}"))
        if merged:
            # The default branch has all its commits (a rerun of merged work): move it up to the default
            # branch (a fast-forward), so its diff is only the new work.
            main.run("worktree", "add", "--quiet", "-B", branch, str(path), repo.default_branch)
            return Workspace(path, branch, repo, fresh=True)
        if main.branch_exists(branch):
            main.run("worktree", "add", "--quiet", str(path), branch)
            return Workspace(path, branch, repo)
        main.run("worktree", "add", "--quiet", "-b", branch, str(path), repo.default_branch)
        return Workspace(path, branch, repo, fresh=True)

    @staticmethod
    def _fetch_published(main: gitops.Checkout, branch: str) -> None:
        """A task branch another daemon published (publish_branch) becomes the local branch, so the run
        continues its WIP. No origin, or no such branch there: the task starts afresh as before."""
        branch = gitops.check_ref_name(branch)
        if main.remote_url() is None:
            return
        tracking = f"refs/remotes/origin/{branch}"
        try:
            main.run("fetch", "--quiet", "origin", f"+refs/heads/{branch}:{tracking}")
        except ServiceError as error:
            if "couldn't find remote ref" not in str(error).lower():
                raise ServiceError(f"Could not fetch the task branch '{branch}' from origin ({error}); its saved "
                                   "work may be there, so the task does not start afresh without it.") from None
            return
        main.run("branch", "--no-track", branch, tracking)

    def publish_branch(self, workspace: Workspace) -> str:
        """Push the task branch to origin (its WIP, for the daemon that continues the task); returns the sha."""
        repo = workspace.repo
        assert repo is not None and workspace.branch is not None
        with self.repo_lock(repo.id):
            tree = self.tree(workspace)
            branch = tree.verify_ref(workspace.branch)
            if tree.remote_url() is None:
                raise ServiceError(f"Repo '{repo.id}' has no 'origin' remote to publish '{branch}' to.")
            sha = tree.run("rev-parse", "--verify", f"refs/heads/{branch}")
            tracking = f"refs/remotes/origin/{branch}"
            expected = tree.run("rev-parse", "--verify", tracking) if tree.ref_exists(tracking) else ""
            # The branch is the task's own (only the daemon holding the task writes it), but a rerun of merged
            # work restarts it from the default branch, which is not a fast-forward: force, with a lease on what
            # this checkout last saw there (absent when empty), so a push we have not seen is never overwritten.
            tree.run("push", "--quiet", f"--force-with-lease=refs/heads/{branch}:{expected}", "origin",
                     f"{sha}:refs/heads/{branch}")
            tree.run("update-ref", tracking, sha)
            return sha

    @staticmethod
    def _merged(main: gitops.Checkout, branch: str, default: str) -> bool:
        try:
            main.run("merge-base", "--is-ancestor", f"refs/heads/{branch}", f"refs/heads/{default}")
            return True
        except ServiceError:
            return False

    @staticmethod
    def refresh_default(main: gitops.Checkout, repo: Repo) -> None:
        """Clone repos: fetch origin and fast-forward the default branch when it is behind (best effort)."""
        if repo.source_type != "clone" or main.remote_url() is None:
            return
        try:
            main.run("fetch", "--quiet", "origin", repo.default_branch)
            remote = f"refs/remotes/origin/{repo.default_branch}"
            if not main.ref_exists(remote):
                return
            if main.current_branch() == repo.default_branch:
                main.run("merge", "--ff-only", "--quiet", remote)
            else:
                main.run("fetch", "--quiet", ".", f"{remote}:refs/heads/{repo.default_branch}")
        except ServiceError as error:
            log.warning("could not refresh %s from origin: %s", repo.id, error)

    def commit_leftovers(self, workspace: Workspace, message: str) -> str | None:
        """The run's commits taken in (collect), then what it left uncommitted committed by the daemon's own git."""
        if workspace.repo is None:
            return None
        self.collect(workspace, workspace.path.name)
        committed, skipped = self.tree(workspace).commit_leftovers(
            message, lambda dirs: generated.left_out(workspace.path, dirs))
        if skipped and self.on_note is not None:
            shown = ", ".join(skipped[:5]) + (f" and {len(skipped) - 5} more" if len(skipped) > 5 else "")
            self.on_note(workspace.path, f"[engine] not committed: {shown}, a folder tools generate that .gitignore "
                                         "does not list (it stays in the worktree; list it in .gitignore, or have "
                                         "the agent commit it if it belongs in the repository)")
        self._collected.add(workspace.path)  # written by the daemon after the take: nothing ran there since
        self._stale.add(workspace.path)  # its `.git` is the run's until settle(), or the worktree's removal
        return committed

    def settle(self, workspace: Workspace) -> None:
        """A worktree kept after its run's end (failed, held, queued, parked): its `.git` the daemon's again, so the
        person's own git never reads what the run wrote there; nothing for one already removed (it landed)."""
        if workspace.path not in self._stale:
            return
        self._stale.discard(workspace.path)
        if workspace.path.exists():
            try:
                self.expose(workspace)
            except (ServiceError, OSError) as error:  # the next expose (any run, setup or check) writes it
                log.warning("could not write the run's repository of kept worktree %s anew: %s", workspace.path, error)
                return
            self._collected.add(workspace.path)  # written by the daemon: nothing ran there since

    def changes(self, workspace: Workspace) -> tuple[list[dict[str, str]], list[str]]:
        """What the task branch changes since it left the default branch, read once for the run's result, the
        protected-paths check and the landing: ([{path, status}], every path touched)."""
        assert workspace.repo is not None and workspace.branch is not None
        checkout = self.tree(workspace)
        return checkout.branch_changes(workspace.repo.default_branch, workspace.branch)

    def tips(self, workspace: Workspace) -> Tips:
        """Both tips and how they relate, and the repository's hooks folder, in one command run in the task's
        worktree (refs are shared by every worktree); the caller may read them beside other reads."""
        assert workspace.repo is not None and workspace.branch is not None
        tree = self.tree(workspace)
        return self._tips(tree, workspace.repo, workspace.branch, hooks=True)

    def _tips(self, checkout: gitops.Checkout, repo: Repo, branch: str, hooks: bool = False) -> Tips:
        seen = self._moves.get(repo.id, (0, ""))[0]  # read before `old`: a later move of ours is then known
        ref, head = f"refs/heads/{repo.default_branch}", f"refs/heads/{branch}"  # never read as an option
        # `A...B` adds `^<base>` for every merge base: the tips and `git merge-base` in one command. When one tip
        # contains the other, that one is the only base (a fast-forward, or nothing new). With `hooks`, the hooks
        # folder comes first: a path may hold newlines, so the output is read from its end, where only git's own
        # lines are (the two tips, `A...B`'s two, then one `^<base>` per base).
        args = ("--git-path", "hooks", ref, head, f"{ref}...{head}") if hooks else (ref, head, f"{ref}...{head}")
        lines = checkout.run("rev-parse", *args, reads_hooks=hooks).split("\n")
        ends = len(lines)
        while ends > 0 and lines[ends - 1].startswith("^"):
            ends -= 1
        bases, shas = [line[1:] for line in lines[ends:]], lines[ends - 4:ends] if ends >= 4 + hooks else []
        # Each name is resolved on its own: a landing that moves the default branch meanwhile may show in `A...B` and
        # not in the first line. `old` is the first read either way; the compare-and-swap from it guards the move.
        if len(shas) != 4 or not all(_SHA.fullmatch(line) for line in (*shas, *bases)):
            raise gitops.GitError(f"git rev-parse in {checkout.path} gave an answer AgentQueue cannot read.")
        old, tip = shas[0], shas[1]
        if not bases:
            raise gitops.GitError(f"'{branch}' and '{repo.default_branch}' in {checkout.path} have no commit in "
                                  "common; the task branch is kept.")
        return Tips(seen, old, tip, old if bases == [old] else tip if bases == [tip] else "merge",
                    hooks="\n".join(lines[:ends - 4]) if hooks else None)

    def land(self, workspace: Workspace, via_remote: bool = False, files: list[str] | None = None,
             check_clean: bool = True, tips: Tips | None = None) -> Landing:
        """Merge the task branch into the default branch (and push clone repos). via_remote (team mode), with
        an origin: the task lands on origin's default branch, and the local one follows it. `files`: the paths
        the branch changes when the caller read them already; `check_clean=False` when it knows the worktree
        holds nothing uncommitted (its leftovers were just committed and nothing ran in it since). `tips`: read
        by `tips` after the branch's last commit, when the caller read them already."""
        repo = workspace.repo
        assert repo is not None and workspace.branch is not None
        main = gitops.Checkout(self.checkout_of(repo), known=True)
        self.collect(workspace, workspace.path.name)  # whatever path lands it, the run's commits first
        if via_remote and main.remote_url() is not None:
            try:
                with self.repo_lock(repo.id):
                    return self._land_remote(workspace, repo, main)
            finally:
                self.expose(workspace)  # its branch merged origin's meanwhile: the worktree's `.git` says so too
        if check_clean:
            self.tree(workspace).require_clean("land the task")
        if files is None:
            files = [f["path"] for f in self.tree(workspace).changed_files(repo.default_branch,
                                                                                      workspace.branch)]
        return self._land(workspace, repo, main, files, tips)

    def _land_remote(self, workspace: Workspace, repo: Repo, main: gitops.Checkout) -> Landing:
        assert workspace.branch is not None
        tree = self.tree(workspace)
        default = repo.default_branch
        tracking = f"refs/remotes/origin/{default}"
        tree.require_clean("land the task")
        for attempt in range(1, PUSH_ATTEMPTS + 1):
            try:
                tree.run("fetch", "--quiet", "origin", f"+refs/heads/{default}:{tracking}")
            except ServiceError as error:
                raise ServiceError(f"Could not fetch '{default}' from origin of repo '{repo.id}' to land "
                                   f"'{workspace.branch}': {error}. The task branch is kept.") from None
            base_sha = tree.run("rev-parse", "--verify", tracking)
            files = [f["path"] for f in tree.changed_files(tracking, workspace.branch)]
            outcome = self._merge_default_into_branch(tree, tracking)
            if outcome is not None:
                outcome.attempts = attempt
                return outcome
            new_sha = tree.run("rev-parse", "--verify", "HEAD")
            try:
                tree.run("push", "--quiet", "origin", f"{new_sha}:refs/heads/{default}")  # never forced
            except ServiceError as error:
                if any(mark in str(error) for mark in _RETRYABLE_PUSH):
                    log.info("origin's %s moved while landing %s (attempt %d): %s", default, workspace.branch,
                             attempt, error)
                    continue
                raise ServiceError(f"Pushing '{workspace.branch}' to '{default}' on origin of repo '{repo.id}' "
                                   f"failed: {error}. The task branch is kept.") from None
            self._follow_remote(main, default, new_sha)
            return Landing(merged=True, sha=new_sha, base_sha=base_sha, pushed=True, files_changed=files,
                           attempts=attempt)
        raise ConflictError(f"Origin's '{default}' of repo '{repo.id}' moved on every one of {PUSH_ATTEMPTS} tries "
                            f"to land '{workspace.branch}'; the task branch is kept. Try again when it is quieter.")

    def compare_and_swap(self, repo: Repo, main: gitops.Checkout, new: str, old: str) -> bool:
        """The merge queue's move: the default branch from exactly `old` to `new` (a commit that contains it, its
        checks passed) under the repo's lock; False when the branch is no longer at `old`. Raises when git refused
        with the branch still there (the person's uncommitted edits in the way)."""
        ref = f"refs/heads/{repo.default_branch}"
        with self.repo_lock(repo.id):
            if main.rev_parse(ref)[0] != old:
                return False
            error = self._move_default(main, ref, new, old)
            if error is None:
                moves, _ = self._moves.get(repo.id, (0, ""))
                self._moves[repo.id] = (moves + 1, new)
                if (moves + 1) % MAINTAIN_EVERY == 0:
                    _MAINTENANCE.submit(self.maintain, main)
                return True
            if main.rev_parse(ref)[0] != old:
                return False
        raise ServiceError(f"Could not move '{repo.default_branch}' in {main.path} to the task's checked work "
                           f"({error}). Commit or stash your changes there; the task branch keeps the work.")

    def follow_remote(self, main: gitops.Checkout, default: str, sha: str) -> None:
        self._follow_remote(main, default, sha)

    @staticmethod
    def _follow_remote(main: gitops.Checkout, default: str, sha: str) -> None:
        """Bring the local default branch up to what landed on origin, only where nothing local is lost."""
        ref = f"refs/heads/{default}"
        try:
            if not main.branch_exists(default):
                main.run("update-ref", ref, sha, "")
            elif main.current_branch() == default:
                if main.is_clean():
                    main.run("merge", "--ff-only", "--quiet", sha)
                else:
                    log.info("left %s in %s behind origin: it has uncommitted changes", default, main.path)
            else:
                old = main.run("rev-parse", "--verify", ref)
                main.run("merge-base", "--is-ancestor", old, sha)  # fails when the local branch has its own work
                main.run("update-ref", ref, sha, old)
        except ServiceError as error:
            log.warning("left %s in %s as it was (origin has the landed work): %s", default, main.path, error)

    def _land(self, workspace: Workspace, repo: Repo, main: gitops.Checkout, files: list[str],
              tips: Tips | None = None) -> Landing:
        """Prepare the landed commit off to the side (a fast-forward, or a merge commit built by merge-tree and
        commit-tree, touching no worktree), then move the default branch to it under the repo's lock: a
        compare-and-swap on the tip the commit was built from. When another landing (or the person) moved
        the branch meanwhile, build again from its new tip; the lock is never held while git merges."""
        assert workspace.branch is not None
        default, branch = repo.default_branch, workspace.branch
        ref = f"refs/heads/{default}"
        tips = tips or self._tips(main, repo, branch)
        seen, old, tip, base = tips.seen, tips.old, tips.tip, tips.base
        for attempt in range(1, LAND_ATTEMPTS + 1):
            moves, latest = self._moves.get(repo.id, (0, ""))
            if moves != seen and latest != old:  # a landing here moved it since `old` was read: build on its tip
                old, seen = latest, moves
                if base != "merge":
                    base = main.run("merge-base", "--end-of-options", old, tip)
            built = self._landed_commit(main, workspace, default, old, tip, base,
                                        moved=functools.partial(self._moved_since, repo.id, seen, old),
                                        worktree=functools.partial(self.tree, workspace))
            if isinstance(built, Landing):
                return built  # a conflict: nothing moved, the branch is kept as it was
            if built is None:  # a landing here moved it while the tree was merged: build again from its tip
                log.info("%s moved while landing %s (attempt %d): merging again from its new tip", default, branch,
                         attempt)
                continue
            if built not in (old, tip):
                base = "merge"  # a retry merges again from main's new tip: no need to ask about a fast-forward
            with self.repo_lock(repo.id):
                moves, latest = self._moves.get(repo.id, (0, ""))
                if moves != seen and latest != old:
                    now = latest  # another landing here moved it since `old` was read: no doomed move to try
                else:
                    error = self._move_default(main, ref, built, old)
                    if error is None:
                        if built != old:
                            self._moves[repo.id] = (moves + 1, built)
                            if (moves + 1) % MAINTAIN_EVERY == 0:
                                _MAINTENANCE.submit(self.maintain, main)
                        break
                    now = main.rev_parse(ref)[0]
                    if now == old:  # not moved: git refused, e.g. over the user's uncommitted edits
                        dirty = [c["path"] for c in main.changes() if c["path"] in files]
                        return Landing(merged=False, dirty=dirty, files_changed=files,
                                       message=f"Could not move '{default}' in {main.path} to the task's "
                                               f"work ({error}). The task branch '{branch}' keeps it.")
                seen = moves
            log.info("%s moved while landing %s (attempt %d): merging again from its new tip", default, branch,
                     attempt)
            old = now
            if base != "merge":  # a fast-forward (or nothing new) from the tip it had: ask again from the new one
                base = main.run("merge-base", "--end-of-options", old, tip)
        else:
            raise ConflictError(f"'{default}' of repo '{repo.id}' moved on every one of {LAND_ATTEMPTS} tries to "
                                f"land '{branch}'; the task branch is kept. Try again when it is quieter.")
        pushed = False
        if repo.source_type == "clone" and main.remote_url() is not None:
            main.push(default)
            pushed = True
        return Landing(merged=True, sha=built if built != old else tip, base_sha=old, pushed=pushed,
                       files_changed=files, tip=tip, attempts=attempt)

    def _moved_since(self, repo_id: str, seen: int, old: str) -> bool:
        """Whether a landing of this process moved the repo's default branch away from `old` since its count of
        moves was `seen` (then a move from `old` is known to fail)."""
        moves, latest = self._moves.get(repo_id, (0, ""))
        return moves != seen and latest != old

    @staticmethod
    def _landed_commit(main: gitops.Checkout, workspace: Workspace, default: str, old: str, tip: str,
                       base: str, moved: Callable[[], bool] | None = None,
                       worktree: Callable[[], gitops.Checkout] | None = None) -> str | Landing | None:
        """What the default branch moves to: the task's tip when it contains the default branch (a fast-forward),
        the default itself when it already has the task's work, else a new merge commit of the default into the
        task branch (the task's tip first, as `git merge` in its worktree made it). `base`: `old`, `tip` or
        "merge" (Tips.base). None when `moved()` says, after the merge, that the default branch left `old`: the
        merge commit would only be thrown away (its move refused), so it is not written."""
        if base == old:
            return tip
        if base == tip:
            return old  # nothing new to land: the default branch stays where it is
        try:
            tree, conflicts = main.merge_tree(tip, old)
        except gitops.GitError:  # a git without merge-tree --write-tree: merge in the worktree, as before
            assert worktree is not None, "the fallback merges in the task's worktree, as the daemon's git sees it"
            tree_checkout = worktree()
            outcome = Workspaces._merge_default_into_branch(tree_checkout, old, default)
            return outcome if outcome is not None else tree_checkout.run("rev-parse", "--verify", "HEAD")
        if tree is None:
            return Landing(merged=False, conflicts=conflicts,
                           message=f"The task branch conflicts with '{default}' in {', '.join(conflicts)}; "
                                   "the merge was aborted and the branch kept for you to resolve.")
        if moved is not None and moved():
            return None
        return main.run_as_author("commit-tree", tree, "-p", tip, "-p", old, "-m",
                                  f"Merge branch '{default}' into {workspace.branch}")

    @staticmethod
    def _move_default(main: gitops.Checkout, ref: str, new: str, old: str) -> ServiceError | None:
        """Move the default branch `ref` from `old` to `new` (the caller holds the repo's lock); git's refusal, if
        it refused. Checked out in the user's checkout: a fast-forward merge there, which git refuses rather than
        overwrite their uncommitted edits, or when the branch moved to where `new` does not lead; otherwise an
        update-ref that fails if the branch is no longer at `old`. Either way a moved branch is never overwritten."""
        if new == old:
            return None
        try:
            if main.head_ref() == ref:
                main.run("merge", "--ff-only", "--quiet", new)
            else:
                main.run("update-ref", ref, new, old)
        except ServiceError as error:
            return error
        return None

    @staticmethod
    def _merge_default_into_branch(tree: gitops.Checkout, default: str, name: str | None = None) -> Landing | None:
        try:
            tree.run("merge-base", "--is-ancestor", default, "HEAD")
            return None  # already contains the default branch: a fast-forward will do
        except ServiceError:
            pass
        outcome = tree.merge(default, tree.current_branch() or "HEAD")
        if outcome.merged:
            return None
        name = name or default.removeprefix("refs/remotes/")
        return Landing(merged=False, conflicts=outcome.conflicts,
                       message=f"The task branch conflicts with '{name}' in {', '.join(outcome.conflicts)}; "
                               "the merge was aborted and the branch kept for you to resolve.")

    @staticmethod
    def maintain(main: gitops.Checkout) -> None:
        """git's automatic maintenance (`gc --auto` and the tasks it is configured for), which AgentQueue's own git
        commands never start (SAFE_GIT): run every MAINTAIN_EVERY landings, off the landing's path."""
        try:
            main.run("maintenance", "run", "--auto", "--quiet", background=True)
        except ServiceError as error:
            log.warning("git maintenance in %s failed: %s", main.path, error)

    def remove(self, workspace: Workspace, delete_branch: bool = True, landed_tip: str | None = None,
               clean: bool = False) -> bool:
        """Remove a landed worktree; refuses (returns False) if it holds uncommitted work or git can't.
        `landed_tip`: the branch's tip that landed; the branch is then deleted only if it is still there (an
        update-ref, which reads no worktree list, so outside the worktree lock), else by `branch -d`. `clean`: the
        caller knows nothing is uncommitted (its leftovers were just committed and nothing ran in it since)."""
        if workspace.repo is None or not workspace.path.exists():
            return False
        if self.before_remove is not None:
            try:
                self.before_remove(workspace)
            except Exception:  # cleanup only: a teardown that breaks never keeps a landed worktree
                log.exception("the teardown of %s failed", workspace.path)
        # Not the repo's lock: no landing waits on a removal. Never `git worktree remove`: it runs `git status` with
        # the worktree's own `.git` (the run's) as its repository. The daemon's own status says whether anything is
        # uncommitted (then the worktree is kept, so nothing is lost), and the folders are removed by hand.
        main = gitops.Checkout(self.checkout_of(workspace.repo), known=True)
        try:
            tree = self.tree(workspace)
            if not clean and self._uncommitted(tree, workspace.path):
                log.warning("keeping worktree %s: it holds uncommitted changes", workspace.path)
                return False
        except ServiceError as error:
            log.warning("keeping worktree %s: %s", workspace.path, error)
            return False
        self.discard(workspace)
        if delete_branch and workspace.branch:
            ref = f"refs/heads/{gitops.check_ref_name(workspace.branch)}"
            if landed_tip is not None:
                self._delete_branch(main, ["update-ref", "--no-deref", "-d", ref, landed_tip], workspace.branch)
            else:
                with self.worktree_lock(workspace.repo.id):
                    self._delete_branch(main, ["branch", "-d", "--", workspace.branch], workspace.branch)
        return True

    @staticmethod
    def _uncommitted(tree: gitops.Checkout, path: Path) -> list[str]:
        """What a removal would lose: the uncommitted paths, but the generated folders a leftovers' commit leaves out
        (they are rebuilt, never work)."""
        status = tree.run_bytes("status", "--porcelain", "-z", "--untracked-files=normal",
                                env={"GIT_OPTIONAL_LOCKS": "0"}).decode("utf-8", "surrogateescape")
        entries = [e for e in status.split("\0") if e]
        dirs = [e[3:] for e in entries if e.startswith("?? ") and e.endswith("/")]
        rebuilt = set(generated.left_out(path, dirs)) if dirs else set()
        return [e for e in entries if not (e.startswith("?? ") and e[3:] in rebuilt)]

    def discard(self, workspace: Workspace) -> None:
        """The worktree and its folder in the repository removed, whatever they hold (the caller decided): each is
        first renamed out of the way in one step, so no other git command ever reads one half removed."""
        assert workspace.repo is not None
        main = gitops.Checkout(self.checkout_of(workspace.repo), known=True)
        common = self.common_dir(main)
        with self.worktree_lock(workspace.repo.id):
            admin = admin_of(common, workspace.path)
            gone: list[Path] = []
            if os.path.lexists(workspace.path):
                gone.append(self.root / f".removed-{workspace.path.name}-{os.getpid()}-{time.monotonic_ns()}")
                os.replace(workspace.path, gone[-1])
            if admin is not None:
                gone.append(common / f"agentqueue-removed-{admin.name}-{time.monotonic_ns()}")
                os.replace(admin, gone[-1])
        self._exposed.pop(workspace.path, None)
        self._collected.discard(workspace.path)
        self._stale.discard(workspace.path)
        for folder in gone:  # fd-based: a link the run left inside is never followed
            _REMOVALS.submit(shutil.rmtree, folder, ignore_errors=True)

    @staticmethod
    def _delete_branch(main: gitops.Checkout, argv: list[str], branch: str) -> None:
        try:
            main.run(*argv)
        except ServiceError as error:
            log.info("kept branch %s: %s", branch, error)


def admin_of(common: Path, worktree: Path) -> Path | None:
    """The folder under `<common>/worktrees/` whose `gitdir` file names `worktree` (git names it after the worktree's
    folder, with a number when that name is taken), or None."""
    want = os.path.realpath(worktree)
    folder = common / "worktrees"
    first = folder / worktree.name
    if _names(first, want):
        return first
    try:
        others = sorted(p for p in folder.iterdir() if p != first)
    except OSError:
        return None
    return next((admin for admin in others if _names(admin, want)), None)


def _names(admin: Path, worktree: str) -> bool:
    """Whether the repository's folder `admin` is the one of the worktree at (the real path) `worktree`."""
    try:
        named = Path((admin / "gitdir").read_text(encoding="utf-8").strip())
    except OSError:
        return False
    return named.name == ".git" and os.path.realpath(named.parent) == worktree


def _inside(path: Path, root: Path) -> bool:
    return path.resolve().is_relative_to(root.resolve())
