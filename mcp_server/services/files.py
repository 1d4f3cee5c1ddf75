"""Workspace files: the jail, and read_file / search_files / run_command inside it.

The jail is every project workspace and every registered repo, compared by *resolved* path
(symlinks and `..` followed first), so `../`, absolute paths, symlinks pointing out and prefix
tricks (`/ws/repo-evil` is not inside `/ws/repo`) are all refused. It is always on.
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import re2

from ..store.db import Store
from .policy import Policies
from .policy_rules import tool_action
from .capped import run_capped
from .errors import InvalidInputError, NotFoundError, ServiceError
from .limits import check_argument, check_path

def compile_search(pattern: str) -> tuple[Any, str | None]:
    """A search pattern for RE2, whose matching time is linear in the text: no pattern a client sends
    can pin the daemon (Python's `re` backtracks: `(a+)+$` over 40 `a`s runs for minutes).
    One RE2 cannot take (a backreference, a lookaround) is searched for literally, with a note."""
    options = re2.Options()
    options.log_errors = False  # RE2 would print parse errors on stderr
    try:
        return re2.compile(pattern, options), None
    except re2.error as error:
        reason = error.args[0].decode(errors="replace") if error.args and isinstance(error.args[0], bytes) \
            else str(error)
        return re2.compile(re2.escape(pattern), options), (
            f"pattern is not a regex this search takes ({reason}; RE2 syntax: no backreferences or lookaround, "
            "so every search runs in linear time); searched for it literally.")


SKIP_DIRS = {".git", "node_modules", "__pycache__", ".venv", ".mypy_cache", ".pytest_cache"}
MAX_SEARCH_FILE_BYTES = 5_000_000
STDOUT_LIMIT = 50_000
STDERR_LIMIT = 20_000


class AccessDeniedError(ServiceError):
    """A path outside the jail."""


@dataclass
class FileSlice:
    path: str
    content: str
    total_lines: int
    truncated: bool


@dataclass
class CommandResult:
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool


def _is_binary(path: Path) -> bool:
    with path.open("rb") as handle:
        return b"\0" in handle.read(8192)


class Files:
    def __init__(self, store: Store, policies: Policies) -> None:
        self.store = store
        self.policies = policies

    def project_of(self, path: Path) -> str | None:
        """The project whose workspace or repo holds `path` (the innermost one), if any."""
        check_path("path", str(path))  # NUL or too long: no project's, and realpath would raise
        real = Path(os.path.realpath(path))
        best: tuple[int, str] | None = None
        rows = self.store.all("SELECT id AS project_id, workspace AS root FROM projects "
                              "UNION ALL SELECT project_id, checkout_path AS root FROM repos")
        for row in rows:
            root = Path(os.path.realpath(row["root"])) if row["root"] else None
            if root and (real == root or real.is_relative_to(root)):
                depth = len(root.parts)
                if best is None or depth > best[0]:
                    best = (depth, row["project_id"])
        return best[1] if best else None

    # -- the jail ------------------------------------------------------------------------------
    def roots(self) -> list[Path]:
        paths = [r["workspace"] for r in self.store.all("SELECT workspace FROM projects")]
        paths += [r["checkout_path"] for r in self.store.all("SELECT checkout_path FROM repos")]
        return [Path(os.path.realpath(p)) for p in paths if p]

    def resolve(self, path: str, base: Path | None = None) -> Path:
        """The real path of `path` (relative to `base`), if it lies inside the jail."""
        if not path or not path.strip():
            raise InvalidInputError("path is empty. Give a path inside a project workspace or a registered repo.")
        if "\0" in path:
            raise InvalidInputError("path contains a NUL byte.")
        check_path("path", path)
        candidate = Path(path.strip()).expanduser()
        if not candidate.is_absolute():
            if base is None:
                raise InvalidInputError(f"{path!r} is relative and there is no project to resolve it against: "
                                        "call set_active_project (read_file also takes project_id), or give an "
                                        "absolute path.")
            candidate = base / candidate
        resolved = Path(os.path.realpath(candidate))
        for root in self.roots():
            if resolved == root or resolved.is_relative_to(root):
                return resolved
        raise AccessDeniedError(
            f"Access denied: {path!r} resolves to {resolved}, outside every project workspace and registered "
            "repo. Only files there can be read, searched or used as working_dir."
        )

    # -- tools ---------------------------------------------------------------------------------
    def read(self, path: str, base: Path | None, offset: int = 0, max_lines: int = 200) -> FileSlice:
        if offset < 0 or max_lines < 1:
            raise InvalidInputError("offset must be ≥ 0 and max_lines ≥ 1.")
        real = self.resolve(path, base)
        if not real.exists():
            raise NotFoundError(f"{path!r} does not exist. search_files mode=find lists files.")
        if real.is_dir():
            raise InvalidInputError(f"{path!r} is a directory; search_files with mode=find lists its files.")
        if _is_binary(real):
            raise InvalidInputError(f"{path!r} is a binary file; read_file shows text files only.")
        with real.open("r", encoding="utf-8", errors="replace") as handle:
            lines = handle.readlines()
        chosen = lines[offset: offset + max_lines]
        return FileSlice(path=str(real), content="".join(chosen), total_lines=len(lines),
                         truncated=offset + max_lines < len(lines))

    def search(self, pattern: str, path: str, base: Path | None, mode: str = "grep",
               max_results: int = 50) -> tuple[list[str], bool, str | None]:
        """(results, truncated, note). grep: `file:line:text` (a regex, else literal); find: glob on names."""
        if not pattern:
            raise InvalidInputError("pattern is empty. Give text or a regex (grep), or a glob like '*.py' (find).")
        if mode not in ("grep", "find"):
            raise InvalidInputError(f"Unknown mode {mode!r}. Use grep (search contents) or find (match file names).")
        if max_results < 1:
            raise InvalidInputError("max_results must be at least 1.")
        top = self.resolve(path, base)
        if not top.exists():
            raise NotFoundError(f"{path!r} does not exist.")
        note = None
        regex = None
        if mode == "grep":
            regex, note = compile_search(pattern)
        results: list[str] = []
        files = [top] if top.is_file() else self._walk(top)
        for file in files:
            rel = file.name if top.is_file() else str(file.relative_to(top))
            if mode == "find":
                if fnmatch.fnmatch(file.name, pattern) or fnmatch.fnmatch(rel, pattern):
                    results.append(rel)
            else:
                results.extend(self._grep(file, rel, regex, max_results + 1 - len(results)))
            if len(results) > max_results:
                return results[:max_results], True, note
        return results, False, note

    def _walk(self, top: Path):
        for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
            for name in sorted(filenames):
                file = Path(dirpath) / name
                if file.is_symlink():
                    try:
                        self.resolve(str(file))  # a link may point out of the jail: skip it then
                    except AccessDeniedError:
                        continue
                yield file

    def _grep(self, file: Path, rel: str, regex: Any, limit: int) -> list[str]:
        try:
            if not file.is_file() or file.stat().st_size > MAX_SEARCH_FILE_BYTES or _is_binary(file):
                return []
            hits = []
            with file.open("r", encoding="utf-8", errors="replace") as handle:
                for number, line in enumerate(handle, 1):
                    line = line.rstrip("\r\n")  # `$` is the end of the line, as in grep
                    if regex.search(line):
                        hits.append(f"{rel}:{number}:{line.rstrip()[:300]}")
                        if len(hits) >= limit:
                            break
            return hits
        except OSError:
            return []

    def run(self, command: str, working_dir: Path, timeout: int = 30) -> CommandResult:
        """Run a shell command in its own process group; on timeout the whole group is killed."""
        if not command or not command.strip():
            raise InvalidInputError("command is empty.")
        check_argument("command", command)
        if not 1 <= timeout <= 600:
            raise InvalidInputError(f"timeout must be between 1 and 600 seconds (got {timeout}).")
        if not working_dir.is_dir():
            raise NotFoundError(f"working_dir {working_dir} is not a directory.")
        # A deny rule always wins, whoever runs the command (a tool call, a hook step, a verify command).
        self.policies.require(tool_action("run_command", command), self.project_of(working_dir),
                              f"Running `{command[:200]}`")
        code, out, err = run_capped(["/bin/sh", "-c", command], working_dir, timeout, STDOUT_LIMIT, STDERR_LIMIT)
        return CommandResult(
            returncode=code, stdout=out.text(),
            stderr=err.text() + (f"\n[killed: timed out after {timeout} s]" if code is None else ""),
            timed_out=code is None,
        )
