"""The one place git happens: safe, typed operations on a checkout, on GitPython.

Every ref or branch a caller names is checked (no leading `-`, a valid ref format) and verified to
exist before use, so no argument can become an option (CVE-2025-68145 and friends). Operations
that could lose work (merge, switching branches) refuse over uncommitted changes, and a conflicted
merge is always aborted, so a repo is never left mid-merge.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import git

from .cpu_priority import lower_process
from .errors import ConflictError, InvalidInputError, NotFoundError, ServiceError, os_limits
from .limits import MAX_NAME

# Used only when neither the repo nor the user's git config has an identity.
FALLBACK_IDENTITY = ("AgentQueue", "agentqueue@localhost")
DIFF_LIMIT = 200_000


class GitError(ServiceError):
    """A git command failed; the message carries git's own words."""


@dataclass
class MergeOutcome:
    merged: bool
    into: str
    sha: str | None = None
    conflicts: list[str] = field(default_factory=list)
    message: str | None = None


def check_ref_name(name: str | None, what: str = "branch") -> str:
    """Refuse refs that could be read as options or are not valid git ref names."""
    if name is None or not name.strip():
        raise InvalidInputError(f"The {what} name is empty. Give a {what} name such as 'feature/login'.")
    name = name.strip()
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME:  # a ref is a file under .git/refs
        raise InvalidInputError(f"The {what} name is too long ({len(name)} characters; at most {MAX_NAME} bytes).")
    if name.startswith("-"):
        raise InvalidInputError(f"Refusing {what} {name!r}: names starting with '-' could be read as git options.")
    if (re.search(r"[\x00-\x20\x7f~^:?*\[\\]", name) or ".." in name or "@{" in name or name.endswith(".lock")
            or name.endswith("/") or name.endswith(".") or "//" in name or name.startswith("/") or name == "@"):
        raise InvalidInputError(f"{name!r} is not a valid git {what} name (no spaces, '..', '~', '^', ':', '?', "
                                "'*', '[', '\\\\', '@{', or a trailing '/', '.' or '.lock').")
    return name


# What git says when it has no identity to write a commit with (then FALLBACK_IDENTITY is used).
_NO_IDENTITY = ("tell me who you are", "unable to auto-detect email", "empty ident name", "identity unknown")


# As GitPython runs git: its messages in English, which the callers match (push refusals, missing refs).
_C_LOCALE = {"LANGUAGE": "C", "LC_ALL": "C"}


# How much lower a background git command's CPU priority is than the daemon's: the removal of a landed task's
# worktree yields the CPU to the starts and landings people wait for (2 cores shared by every run).
BACKGROUND_NICE = 10


def _run_lowered(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    """subprocess.run(argv, capture_output=True) with the child's CPU priority lowered by BACKGROUND_NICE as it
    starts."""
    with subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                          env=env) as process:
        lower_process(process.pid, BACKGROUND_NICE)
        try:
            stdout, stderr = process.communicate()
        except BaseException:  # as subprocess.run does: no git left running behind an interrupted call
            process.kill()
            raise
    return subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)


def _fallback_env() -> dict[str, str]:
    name, email = FALLBACK_IDENTITY
    return {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email,
            "GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email}


# Every git command AgentQueue runs: no hook and no fsmonitor command, whatever a repo, a worktree or an agent
# configured (a task's worktree is hostile until reviewed, and AgentQueue's own commits run outside the sandbox).
# Nor git's automatic maintenance after a merge or commit (one more process inside the landing's lock): the engine
# runs it itself now and then (Workspaces.maintain).
SAFE_GIT = ("-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "maintenance.auto=false")
# SAFE_GIT less its hooks override, for a command that runs no hook and reads core.hooksPath itself (`rev-parse
# --git-path hooks`: with the override it would print /dev/null).
SAFE_GIT_READING_HOOKS = SAFE_GIT[2:]


class Checkout:
    """A git working tree at `path`."""

    def __init__(self, path: str | Path, *, known: bool = False, git_dir: Path | None = None) -> None:
        """`known`: a working tree AgentQueue made or registered (a task's worktree, a repo's checkout); with a `.git`
        at its root, GitPython's parse of the repository (a millisecond or two, a few times per task) waits until
        something needs it. Without one it is checked in full, so git never runs in a parent repository.
        `git_dir`: the repository's folder, named by the daemon (a task worktree's own folder in its repository):
        every command then runs with GIT_DIR and GIT_WORK_TREE set, so nothing in the working tree (a `.git` that a
        run wrote) decides which repository, index, HEAD or config git uses."""
        self.path = Path(path)
        if not self.path.is_dir():
            raise NotFoundError(f"{self.path} does not exist on disk. Re-create it or add the repo again.")
        self._repo: git.Repo | None = None
        self.git_dir = git_dir
        if git_dir is not None or (known and (self.path / ".git").exists()):
            return
        try:
            self._repo = git.Repo(self.path)
        except (git.InvalidGitRepositoryError, git.NoSuchPathError):
            try:
                top = git.Repo(self.path, search_parent_directories=True).working_tree_dir
            except (git.InvalidGitRepositoryError, git.NoSuchPathError):
                raise InvalidInputError(f"{self.path} is not a git repository.") from None
            raise InvalidInputError(f"{self.path} is inside the repository {top}; use its root.") from None

    @property
    def repo(self) -> git.Repo:
        if self.git_dir is not None:  # GitPython would find the repository through the working tree's `.git`
            raise GitError(f"{self.path} is a task's worktree: only git commands with its own git folder run there.")
        if self._repo is None:
            self._repo = git.Repo(self.path)
        return self._repo

    def environ(self, env: dict[str, str] | None = None) -> dict[str, str]:
        """The environment every git command here runs with: the daemon's, git in English, the named git folder."""
        named = {} if self.git_dir is None else {"GIT_DIR": str(self.git_dir), "GIT_WORK_TREE": str(self.path)}
        return {**os.environ, **_C_LOCALE, **named, **(env or {})}

    def popen(self, *args: str, safe: bool = True) -> subprocess.Popen[bytes]:
        """A git command started here, its output to be read by the caller (so two reads can run at once);
        `safe=False` only to read a setting SAFE_GIT would override."""
        return subprocess.Popen(["git", *(SAFE_GIT if safe else ()), *args], cwd=self.path, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=self.environ())

    # -- running git ---------------------------------------------------------------------------
    def run(self, *args: str, env: dict[str, str] | None = None, reads_hooks: bool = False,
            background: bool = False) -> str:
        """git's output as text, less its final newline; a failure raises GitError with git's own words."""
        out = self.run_bytes(*args, env=env, reads_hooks=reads_hooks, background=background)
        return out.decode("utf-8", "surrogateescape").removesuffix("\n")

    def run_bytes(self, *args: str, env: dict[str, str] | None = None, reads_hooks: bool = False,
                  background: bool = False, stdin: bytes | None = None) -> bytes:
        """git's raw output (for -z listings: paths as they are, never quoted). A bare subprocess, not GitPython's
        execute, which costs a few milliseconds more per command; git speaks English (C locale) as there.
        `reads_hooks`: a command that runs no hook and reads core.hooksPath (SAFE_GIT_READING_HOOKS).
        `background`: cleanup nobody waits for, run at a lower CPU priority (BACKGROUND_NICE). `stdin`: what git
        reads on its standard input (else nothing)."""
        safe = SAFE_GIT_READING_HOOKS if reads_hooks else SAFE_GIT
        argv, environ = ["git", *safe, *args], self.environ(env)
        with os_limits(f"an argument of git {args[0]}"):  # over 128 KiB, or a NUL byte
            if background:
                done = _run_lowered(argv, self.path, environ)
            elif stdin is not None:
                done = subprocess.run(argv, cwd=self.path, capture_output=True, input=stdin, env=environ)
            else:
                done = subprocess.run(argv, cwd=self.path, capture_output=True, stdin=subprocess.DEVNULL, env=environ)
        if done.returncode != 0:
            stderr = done.stderr.decode("utf-8", "replace").strip()
            raise GitError(f"git {args[0]} failed in {self.path}: {stderr or f'exit code {done.returncode}'}")
        return done.stdout

    def run_as_author(self, *args: str) -> str:
        """A command that writes a commit, as the user's git identity; the fallback only when git has none (asked
        after the fact, so the usual case costs no extra command)."""
        try:
            return self.run(*args)
        except GitError as error:
            if not any(mark in str(error).lower() for mark in _NO_IDENTITY):
                raise
        return self.run(*args, env=_fallback_env())

    def identity_env(self) -> dict[str, str]:
        """The env a command that writes commits needs here (a rebase, which cannot simply be run again)."""
        return self._identity_env()

    def _identity_env(self) -> dict[str, str]:
        """Author/committer env only when git has no identity configured (never overrides the user's)."""
        # Ask git itself: it honours GIT_CONFIG_GLOBAL, includes and GIT_AUTHOR_* env, GitPython's reader does not.
        try:
            self.run("var", "GIT_AUTHOR_IDENT")
            self.run("var", "GIT_COMMITTER_IDENT")
            return {}
        except GitError:
            pass
        return _fallback_env()

    # -- reading -------------------------------------------------------------------------------
    def current_branch(self) -> str | None:
        """None on a detached HEAD."""
        try:
            return self.run("symbolic-ref", "--quiet", "--short", "HEAD")
        except GitError:
            return None

    def head_ref(self) -> str | None:
        """The ref HEAD points at ('refs/heads/main'), None on a detached HEAD. Read from the HEAD file of a plain
        repository (a file git keeps in one documented form), so a landing's lock is not held over a git process;
        from git itself for anything else (a linked worktree, the reftable format)."""
        dot_git = self.git_dir or self.path / ".git"
        if dot_git.is_dir() and not (dot_git / "reftable").exists():
            try:
                text = (dot_git / "HEAD").read_text(encoding="utf-8").strip()
            except OSError:
                text = ""
            if text.startswith("ref: refs/"):
                return text.removeprefix("ref: ")
            if re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", text):
                return None
        try:
            return self.run("symbolic-ref", "--quiet", "HEAD")
        except GitError:
            return None

    def head_sha(self) -> str | None:
        try:
            return self.run("rev-parse", "--verify", "--quiet", "HEAD")
        except GitError:
            return None

    def rev_parse(self, *args: str) -> list[str]:
        """Several refs resolved in one command, one sha per line."""
        return self.run("rev-parse", *args).splitlines()

    def ref_exists(self, ref: str) -> bool:
        try:
            self.run("rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}")
            return True
        except GitError:
            return False

    def verify_ref(self, ref: str, what: str = "branch") -> str:
        ref = check_ref_name(ref, what)
        if not self.ref_exists(ref):
            raise NotFoundError(f"No {what} '{ref}' in {self.path}. git_log or get_git_status shows branches.")
        return ref

    def branch_exists(self, branch: str) -> bool:
        return self.ref_exists(f"refs/heads/{branch}")

    def changes(self) -> list[dict[str, str]]:
        """Uncommitted changes as [{path, status}] (porcelain codes: M, A, D, R, ??, UU…)."""
        out = self.run("status", "--porcelain=v1", "--untracked-files=all")
        return [{"path": line[3:], "status": line[:2].strip() or "?"} for line in out.splitlines() if line]

    def is_clean(self) -> bool:
        return not self.changes()

    def log(self, count: int = 10, ref: str = "HEAD", skip: int = 0) -> list[dict[str, str]]:
        if self.head_sha() is None:
            return []
        sep = "\x1f"
        out = self.run("log", f"-n{int(count)}", f"--skip={int(skip)}", f"--format=%H{sep}%an{sep}%aI{sep}%s",
                       "--end-of-options", ref)
        commits = []
        for line in out.splitlines():
            sha, author, date, message = line.split(sep, 3)
            commits.append({"sha": sha, "author": author, "date": date, "message": message})
        return commits

    def remote_url(self, name: str = "origin") -> str | None:
        try:
            return self.run("remote", "get-url", "--", name)
        except GitError:
            return None

    def remote_default_branch(self) -> str | None:
        try:
            return self.run("symbolic-ref", "--quiet", "--short", "refs/remotes/origin/HEAD").split("/", 1)[1]
        except (GitError, IndexError):
            return None

    def merge_base(self, base: str, ref: str = "HEAD") -> str:
        return self.run("merge-base", "--end-of-options", base, ref)

    def diff(self, base: str | None = None, ref: str | None = None, paths: tuple[str, ...] = (),
             limit: int | None = DIFF_LIMIT) -> tuple[str, bool]:
        """(diff text, truncated). base only: working tree vs merge-base; base+ref: ref vs merge-base.
        paths narrow it to those files; limit=None keeps it whole (the caller pages it)."""
        if base is None:
            text = self.run("diff", "HEAD", "--", *paths) if self.head_sha() else ""
        elif ref is None:
            text = self.run("diff", self.merge_base(base), "--", *paths)
        else:
            text = self.run("diff", f"{self.merge_base(base, ref)}..{ref}", "--", *paths)
        if limit is not None and len(text) > limit:
            return text[:limit] + f"\n[diff truncated: {len(text) - limit} more characters]", True
        return text, False

    def branch_changes(self, base: str, ref: str) -> tuple[list[dict[str, str]], list[str]]:
        """What `ref` changes since it left `base`, in one diff: ([{path, status, mode, sha, old}] (a rename by its
        new path; mode and sha of the blob it has after, old: the blob before), every path it touches (both sides
        of a rename; a copy leaves its source)). The blobs are for the size of a landing (engine/land_guards.py)."""
        base, ref = check_ref_name(base, "base branch"), check_ref_name(ref)
        out = self.run_bytes("diff", "--raw", "--no-abbrev", "-z", "--no-ext-diff", "--no-textconv",
                             f"{base}...{ref}", "--")
        fields = out.decode("utf-8", "surrogateescape").split("\0")
        files: dict[str, dict[str, str]] = {}
        touched: set[str] = set()
        at = 0
        while at < len(fields) and fields[at].startswith(":"):
            meta = fields[at][1:].split()  # old mode, new mode, old sha, new sha, status
            status = meta[4]
            paths = fields[at + 1:at + (3 if status[0] in "RC" else 2)]
            at += 1 + len(paths)
            files[paths[-1]] = {"path": paths[-1], "status": status[0], "mode": meta[1], "sha": meta[3],
                                "old": meta[2]}
            touched.update(paths if status[0] == "R" else paths[-1:])  # a copy leaves its source as it was
        return [files[p] for p in sorted(files)], sorted(touched)

    def merge_tree(self, ours: str, theirs: str) -> tuple[str | None, list[str]]:
        """Merge two commits off to the side (no worktree, no index, no ref moves): (the merged tree, []) or
        (None, the conflicted paths). Raises GitError when git cannot (older than 2.38: no --write-tree)."""
        done = subprocess.run(["git", *SAFE_GIT, "merge-tree", "--write-tree", "--name-only", "-z", "--no-messages",
                               "--end-of-options", ours, theirs], cwd=self.path, capture_output=True,
                              stdin=subprocess.DEVNULL, env=self.environ())
        if done.returncode not in (0, 1):
            raise GitError(f"git merge-tree failed in {self.path}: {done.stderr.decode('utf-8', 'replace').strip()}")
        fields = done.stdout.decode("utf-8", "surrogateescape").split("\0")
        if done.returncode == 0:
            return fields[0].strip(), []
        conflicts = []
        for path in fields[1:]:
            if not path:
                break
            if path not in conflicts:
                conflicts.append(path)
        return None, conflicts

    def changed_files(self, base: str, ref: str | None = None) -> list[dict[str, str]]:
        """Files that differ from the merge-base with `base` (working tree and untracked, unless `ref`)."""
        start = self.merge_base(base, ref or "HEAD")
        target = [f"{start}..{ref}"] if ref else [start]
        out = self.run("diff", "--name-status", *target, "--")
        files = {}
        for line in out.splitlines():
            parts = line.split("\t")
            files[parts[-1]] = parts[0][0]
        if not ref:
            for path in self.run("ls-files", "--others", "--exclude-standard").splitlines():
                files.setdefault(path, "?")
        return [{"path": p, "status": s} for p, s in sorted(files.items())]

    # -- writing -------------------------------------------------------------------------------
    def commit_all(self, message: str, exclude: Sequence[str] = ()) -> tuple[bool, str | None]:
        """Stage everything under the repo root (but the untracked folders `exclude` names) and commit; (False, HEAD)
        when there is nothing to commit."""
        if not message or not message.strip():
            raise InvalidInputError("The commit message is empty. Say what the change does.")
        self.run("add", "-A", "--", ".", *(f":(exclude,literal){path.rstrip('/')}" for path in exclude))
        if not self.run("diff", "--cached", "--name-only"):
            return False, self.head_sha()
        self.run_as_author("commit", "-q", "-m", message.strip())
        return True, self.head_sha()

    def commit_leftovers(self, message: str, leave_out: Callable[[list[str]], list[str]] | None = None
                         ) -> tuple[str | None, list[str]]:
        """commit_all for a task's worktree, lean: one status when there is nothing to commit (the usual case:
        the agent committed its work). `leave_out` picks, of the wholly untracked folders (`dir/`), those not to
        commit (engine/generated.py). Returns the new commit (or None) and the folders left out."""
        # A read only (git's --no-optional-locks): the stat data it refreshes is not written back on the landing's path.
        status = self.run_bytes("status", "--porcelain", "-z", "--untracked-files=normal",
                                env={"GIT_OPTIONAL_LOCKS": "0"}).decode("utf-8", "surrogateescape")
        if not status:
            return None, []
        untracked = [e[3:] for e in status.split("\0") if e.startswith("?? ") and e.endswith("/")]
        skipped = leave_out(untracked) if leave_out and untracked else []
        committed, sha = self.commit_all(message, exclude=skipped)
        return (sha if committed else None), skipped

    def require_clean(self, action: str) -> None:
        changes = self.changes()
        if changes:
            listed = ", ".join(c["path"] for c in changes[:5]) + (" …" if len(changes) > 5 else "")
            raise ConflictError(
                f"Refusing to {action} in {self.path}: it has uncommitted changes ({listed}). "
                "Commit them (commit_changes) or stash them first, so nothing is lost."
            )

    def create_branch(self, branch: str, base: str | None = None) -> str:
        branch = check_ref_name(branch)
        if self.branch_exists(branch):
            raise ConflictError(f"Branch '{branch}' already exists in {self.path}; checkout_branch switches to it.")
        if base is not None:
            base = self.verify_ref(base, "base branch")
            self.require_clean(f"branch from '{base}'")
            self.run("switch", "-q", "-c", branch, base)
        else:
            self.run("switch", "-q", "-c", branch)  # from HEAD: uncommitted work comes along, nothing lost
        return branch

    def checkout(self, branch: str) -> str:
        branch = self.verify_ref(branch)
        if not self.branch_exists(branch):
            raise NotFoundError(f"'{branch}' is not a local branch in {self.path}; create_branch makes one.")
        if self.current_branch() != branch:
            self.require_clean(f"switch to '{branch}'")
            self.run("switch", "-q", branch)
        return branch

    def merge(self, branch: str, into: str) -> MergeOutcome:
        """Merge `branch` into `into`; on conflict abort and report the files. Returns to the original branch."""
        branch = self.verify_ref(branch)
        into = self.verify_ref(into, "target branch")
        if not self.branch_exists(into):
            raise NotFoundError(f"'{into}' is not a local branch in {self.path}.")
        self.require_clean(f"merge '{branch}' into '{into}'")
        original = self.current_branch()
        if original != into:
            self.run("switch", "-q", into)
        try:
            try:
                self.run("merge", "--no-edit", "--no-ff", "--end-of-options", branch, env=self._identity_env())
            except GitError as error:
                conflicts = self.run("diff", "--name-only", "--diff-filter=U").splitlines()
                if self._merging():
                    self.run("merge", "--abort")
                if conflicts:
                    return MergeOutcome(merged=False, into=into, conflicts=conflicts,
                                        message=f"'{branch}' conflicts with '{into}'; the merge was aborted and "
                                                f"'{into}' is unchanged.")
                raise error from None
            return MergeOutcome(merged=True, into=into, sha=self.head_sha())
        finally:
            if original and original != into and self.current_branch() != original:
                self.run("switch", "-q", original)

    def _merging(self) -> bool:
        return Path(self.run("rev-parse", "--absolute-git-dir") if self.git_dir is None else self.git_dir,
                    "MERGE_HEAD").exists()

    def push(self, branch: str, remote: str = "origin") -> str:
        branch = self.verify_ref(branch)
        if self.remote_url(remote) is None:
            raise InvalidInputError(f"{self.path} has no '{remote}' remote to push to. Add one with "
                                    "`git remote add origin <url>` in the repo.")
        self.run("push", "--porcelain", "-u", remote, f"refs/heads/{branch}:refs/heads/{branch}")
        return branch


def require_free(dest: Path, hint: str) -> None:
    if dest.exists() and not dest.is_dir():
        raise ConflictError(f"{dest} already exists and is not a directory; {hint}.")
    if dest.exists() and any(dest.iterdir()):
        raise ConflictError(f"{dest} already exists and is not empty; {hint}.")


# (percent done or None, what git is doing): clone progress for a person waiting on it.
Progress = Callable[[float | None, str], None]

_STAGES = {git.RemoteProgress.COUNTING: "counting objects", git.RemoteProgress.COMPRESSING: "compressing objects",
           git.RemoteProgress.RECEIVING: "receiving objects", git.RemoteProgress.RESOLVING: "resolving deltas",
           git.RemoteProgress.CHECKING_OUT: "checking out files"}


def _clone_progress(report: Progress) -> Callable[..., None]:
    """Adapt git's progress lines to `report`, at most every half second (a fast clone says little)."""
    last = [0.0]

    def update(op_code: int, cur_count: float | str, max_count: float | str | None = None, message: str = "") -> None:
        now = time.monotonic()
        if now - last[0] < 0.5 and not op_code & git.RemoteProgress.END:
            return
        last[0] = now
        stage = _STAGES.get(op_code & git.RemoteProgress.OP_MASK, "cloning")
        try:
            percent = 100.0 * float(cur_count) / float(max_count) if max_count else None
        except (TypeError, ValueError, ZeroDivisionError):
            percent = None
        report(percent, f"git clone: {stage}" + (f" ({percent:.0f}%)" if percent is not None else ""))

    return update


def clone(url: str, dest: Path, progress: Progress | None = None) -> Checkout:
    if url.startswith("-"):
        raise InvalidInputError(f"Refusing url {url!r}: it starts with '-' and could be read as a git option.")
    require_free(dest, "choose another name for the repo")
    try:
        if progress is None:
            git.Repo.clone_from(url, dest, multi_options=["--quiet"])
        else:
            git.Repo.clone_from(url, dest, progress=_clone_progress(progress))
    except git.GitCommandError as error:
        raise GitError(f"git clone of {url} failed: {(error.stderr or '').strip()}") from None
    except (git.exc.UnsafeProtocolError, git.exc.UnsafeOptionError):
        raise InvalidInputError(f"Refusing url {url!r}: transports like 'ext::' can run commands. Give an https, "
                                "ssh or git URL, or the path of a local repository.") from None
    return Checkout(dest)


def init(dest: Path, default_branch: str) -> Checkout:
    check_ref_name(default_branch, "default branch")
    require_free(dest, "use source=link for an existing checkout")
    dest.mkdir(parents=True, exist_ok=True)
    git.Repo.init(dest, initial_branch=default_branch)
    checkout = Checkout(dest)
    checkout.run("commit", "-q", "--allow-empty", "-m", "Initial commit", env=checkout._identity_env())
    return checkout
