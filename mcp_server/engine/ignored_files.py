"""Copy a repository's gitignored files (a `.env`, a local config) from its checkout into a task's new worktree.

A file is copied when it matches one of the patterns (.gitignore syntax: `.agentqueue.toml`'s `copy` and
`.worktreeinclude`, as Claude Code reads it) and git ignores it in the checkout: tracked files come with the
branch and untracked ones are the person's work in progress, so neither is copied. The repository is hostile
input: every path is opened one folder at a time without following a symlink (a pattern can never lead the
daemon into `~/.ssh`, whose contents the sandbox hides from the agent), only regular files are read, nothing in
the worktree is overwritten, and a copied file that the task branch would not ignore (so would commit) is
taken out again.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..services.gitops import SAFE_GIT

_ENV = {"LANGUAGE": "C", "LC_ALL": "C"}
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


@dataclass
class Copied:
    files: list[str] = field(default_factory=list)  # relative paths, '/'-separated
    refused: list[tuple[str, str]] = field(default_factory=list)  # (path, why)


def copy_ignored(checkout: Path, worktree: Path, patterns: Sequence[str]) -> Copied:
    """Copy the checkout's ignored files that match `patterns` into the same paths of `worktree`."""
    done = Copied()
    if not patterns:
        return done
    args = ["ls-files", "-z", "--others", "--ignored", *(f"--exclude={p}" for p in patterns)]
    matched = _paths(_git(checkout, args))
    if not matched:
        return done
    for rel in _paths(_git(checkout, ["check-ignore", "-z", "--stdin"], _joined(matched))):
        why = _copy_one(checkout, worktree, rel)
        if why:
            done.refused.append((rel, why))
        else:
            done.files.append(rel)
    if done.files:  # what the task branch does not ignore would be committed with the agent's work: never
        still = set(_paths(_git(worktree, ["check-ignore", "-z", "--stdin"], _joined(done.files))))
        for rel in [f for f in done.files if f not in still]:
            os.unlink(worktree / rel)
            done.files.remove(rel)
            done.refused.append((rel, "the task branch does not ignore it, so it would be committed"))
    return done


def _git(cwd: Path, args: list[str], stdin: bytes | None = None) -> bytes:
    """git's output; exit 1 is check-ignore's "none of them is ignored"."""
    proc = subprocess.run(["git", *SAFE_GIT, *args], cwd=cwd, input=stdin if stdin is not None else b"",
                          capture_output=True, env={**os.environ, **_ENV})
    if proc.returncode not in (0, 1) or (proc.returncode == 1 and args[0] != "check-ignore"):
        error = proc.stderr.decode("utf-8", "replace").strip()
        raise OSError(f"git {args[0]} failed in {cwd}: {error or f'exit code {proc.returncode}'}")
    return proc.stdout


def _paths(out: bytes) -> list[str]:
    return sorted({p.decode("utf-8", "surrogateescape") for p in out.split(b"\0") if p})


def _joined(paths: list[str]) -> bytes:
    return b"".join(p.encode("utf-8", "surrogateescape") + b"\0" for p in paths)


def _copy_one(checkout: Path, worktree: Path, rel: str) -> str | None:
    """Copy one file, or say why not."""
    parts = rel.split("/")
    if rel.startswith("/") or any(p in ("", ".", "..") for p in parts) or parts[0] == ".git":
        return "not a path inside the repository"
    opened: list[int] = []
    try:
        source_dir = _walk(checkout, parts[:-1], opened, create=False)
        if source_dir is None:
            return "a folder on its path is a symlink or cannot be opened"
        try:
            source = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=source_dir)
        except OSError:
            return "a symlink or unreadable"
        opened.append(source)
        info = os.fstat(source)
        if not stat.S_ISREG(info.st_mode):
            return "not a regular file"
        target_dir = _walk(worktree, parts[:-1], opened, create=True)
        if target_dir is None:
            return "a folder on its path in the worktree is a symlink or a file"
        try:  # O_EXCL: never over a file (or a symlink) already in the worktree, e.g. a tracked one
            target = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600,
                             dir_fd=target_dir)
        except FileExistsError:
            return "the worktree has it already"
        with os.fdopen(os.dup(source), "rb") as reader, os.fdopen(target, "wb") as writer:
            shutil.copyfileobj(reader, writer, 1 << 20)
            os.fchmod(writer.fileno(), stat.S_IMODE(info.st_mode) & 0o777)
        return None
    except OSError as error:
        return f"could not be copied ({error.strerror or error})"
    finally:
        for fd in opened:
            os.close(fd)


def _walk(root: Path, folders: list[str], opened: list[int], create: bool) -> int | None:
    """A descriptor of root/folders/..., opened one folder at a time without following symlinks (None when one is
    a symlink or not a folder); `create` makes missing folders. Every descriptor opened goes into `opened`."""
    current = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    opened.append(current)
    for name in folders:
        try:
            current = os.open(name, _DIR_FLAGS, dir_fd=current)
        except FileNotFoundError:
            if not create:
                return None
            os.mkdir(name, 0o755, dir_fd=current)
            current = os.open(name, _DIR_FLAGS, dir_fd=current)
        except (NotADirectoryError, OSError):
            return None
        opened.append(current)
    return current
