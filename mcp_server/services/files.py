"""Workspace files: the jail, and read_file / search_files / run_command inside it.

The jail is every project workspace and every registered repo, compared by *resolved* path
(symlinks and `..` followed first), so `../`, absolute paths, symlinks pointing out and prefix
tricks (`/ws/repo-evil` is not inside `/ws/repo`) are all refused. It is always on.
"""

from __future__ import annotations

import fnmatch
import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import re2

from ..sandbox.runs import Sandbox
from ..store.db import Store
from .policy import Policies
from . import shell
from .policy_rules import tool_action
from .capped import run_capped
from .errors import InvalidInputError, NotFoundError, ServiceError
from .limits import check_argument, check_path
from .result_size import PAGE_CHARS, cut, escaped_cost

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
STDOUT_LIMIT = 24_000  # bytes kept: both together, escaped, stay inside one result (result_size)
STDERR_LIMIT = 8_000


class AccessDeniedError(ServiceError):
    """A path outside the jail."""


@dataclass
class FileSlice:
    path: str
    content: str
    total_lines: int
    truncated: bool
    note: str | None = None


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
    def __init__(self, store: Store, policies: Policies, sandbox: Sandbox | None = None) -> None:
        self.store = store
        self.policies = policies
        self.sandbox = sandbox  # every command runs inside it (None: a bare Files, in unit tests of the jail)

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
        chosen: list[str] = []
        size, total, long_line = 0, 0, 0
        with real.open("r", encoding="utf-8", errors="replace") as handle:
            for total, line in enumerate(handle, 1):  # counted, never all held: a file may be gigabytes
                if offset < total <= offset + max_lines and size < PAGE_CHARS:
                    if size + (line_cost := escaped_cost(line)) > PAGE_CHARS:
                        if not chosen:  # one line longer than a page: its start, and how to see the rest
                            chosen.append(cut(line, PAGE_CHARS))
                            long_line = len(line.rstrip("\n"))
                        size = PAGE_CHARS
                        continue
                    chosen.append(line)
                    size += line_cost
        end = min(offset, total) + len(chosen)
        truncated = end < total or bool(long_line)
        note = None
        if long_line:
            shown = len(chosen[0])
            note = (f"line {end:,} is {long_line:,} characters; its first {shown:,} are shown. run_command "
                    f"`cut -c {shown + 1}-{shown + PAGE_CHARS // 2} {shlex.quote(str(real))}` shows more of it"
                    + (f"; read_file with offset={end} goes on after it." if end < total else "."))
        elif truncated:
            note = (f"showing lines {min(offset, total) + 1:,}–{end:,} of {total:,}; call read_file with "
                    f"offset={end} for the next part.")
        return FileSlice(path=str(real), content="".join(chosen), total_lines=total, truncated=truncated, note=note)

    def search(self, pattern: str, path: str, base: Path | None, mode: str = "grep",
               max_results: int = 50, offset: int = 0) -> tuple[list[str], bool, str | None]:
        """(results, truncated, note). grep: `file:line:text` (a regex, else literal); find: glob on names.
        Results are skipped up to offset, then at most max_results are kept, fewer if they would not fit a page."""
        if not pattern:
            raise InvalidInputError("pattern is empty. Give text or a regex (grep), or a glob like '*.py' (find).")
        if mode not in ("grep", "find"):
            raise InvalidInputError(f"Unknown mode {mode!r}. Use grep (search contents) or find (match file names).")
        if max_results < 1 or offset < 0:
            raise InvalidInputError("max_results must be at least 1 and offset at least 0.")
        top = self.resolve(path, base)
        if not top.exists():
            raise NotFoundError(f"{path!r} does not exist.")
        note = None
        regex = None
        if mode == "grep":
            regex, note = compile_search(pattern)
        wanted = offset + max_results + 1
        results: list[str] = []
        files = [top] if top.is_file() else self._walk(top)
        for file in files:
            rel = file.name if top.is_file() else str(file.relative_to(top))
            if mode == "find":
                if fnmatch.fnmatch(file.name, pattern) or fnmatch.fnmatch(rel, pattern):
                    results.append(rel)
            else:
                results.extend(self._grep(file, rel, regex, wanted - len(results)))
            if len(results) >= wanted:
                break
        more = len(results) >= wanted
        kept, size = [], 0
        for hit in results[offset: offset + max_results]:
            size += escaped_cost(hit) + 8  # quotes, comma, indentation
            if size > PAGE_CHARS:
                more = True
                break
            kept.append(hit)
        if more:
            page_note = (f"showing results {offset + 1:,}–{offset + len(kept):,}; call search_files with "
                         f"offset={offset + len(kept)} for more.")
            note = f"{note} {page_note}" if note else page_note
        return kept, more, note

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

    def run(self, command: str, working_dir: Path, timeout: int = 30, actor: str = "cli",
            task_id: str | None = None, env: Mapping[str, str] | None = None) -> CommandResult:
        """Run a shell command in its own process group, inside the sandbox; on timeout the whole group is killed.
        `env`: variables set for it on top of what every run gets (a task's port)."""
        if not command or not command.strip():
            raise InvalidInputError("command is empty.")
        check_argument("command", command)
        if not 1 <= timeout <= 600:
            raise InvalidInputError(f"timeout must be between 1 and 600 seconds (got {timeout}).")
        if not working_dir.is_dir():
            raise NotFoundError(f"working_dir {working_dir} is not a directory.")
        # A deny rule always wins, whoever runs the command (a tool call, a hook step, a verify command). A task's
        # command is its project's, wherever its worktree is (worktrees live under the home, in no project's folder).
        task_project = self.store.scalar("SELECT project_id FROM tasks WHERE id = ?", (task_id,)) if task_id else None
        project_id = task_project or self.project_of(working_dir)
        self.policies.require(tool_action("run_command", command), project_id, f"Running `{command[:200]}`")
        argv = shell.shell_argv(command)  # bash: the grammar the policy judged the command by
        # A command run is a run like an agent's: the allowlisted environment, never the daemon's secrets (issue 33).
        base = self.sandbox.settings.agent_environment("command") if self.sandbox is not None else None
        full_env = {**(os.environ if base is None else base), **(env or {})} if env or base is not None else None
        if self.sandbox is None:
            code, out, err = run_capped(argv, working_dir, timeout, STDOUT_LIMIT, STDERR_LIMIT, env=full_env)
        else:
            code, out, err = self._run_contained(argv, working_dir, timeout, project_id, actor, task_id, full_env)
        return CommandResult(
            returncode=code, stdout=_shown(out, STDOUT_LIMIT, "stdout"),
            stderr=_shown(err, STDERR_LIMIT, "stderr")
            + (f"\n[killed: timed out after {timeout} s]" if code is None else ""),
            timed_out=code is None,
        )


    def _run_contained(self, argv: list[str], working_dir: Path, timeout: int, project_id: str | None, actor: str,
                       task_id: str | None, full_env: dict[str, str] | None = None) -> tuple[int | None, Any, Any]:
        assert self.sandbox is not None
        refused = self.sandbox.blocked(project_id)
        if refused:
            raise ServiceError(refused)
        env = full_env if full_env is not None else dict(os.environ)
        if not self.sandbox.required(project_id) and self.sandbox.unavailable():
            return run_capped(argv, working_dir, timeout, STDOUT_LIMIT, STDERR_LIMIT, env=full_env)
        rules = self.sandbox.rules_for(working_dir, project_id, preset=self.policies.effective(project_id).preset.name,
                                       env=env)
        on_deny = self.sandbox.deny_recorder(actor, project_id, task_id)
        also = lambda host, port: self.sandbox.registry_allowed(project_id, host, port)  # noqa: E731
        with self.sandbox.contained(argv, env, rules, on_deny, also) as (inner, inner_env):
            return run_capped(inner, working_dir, timeout, STDOUT_LIMIT, STDERR_LIMIT, env=inner_env)


def _shown(captured: Any, limit: int, stream: str) -> str:
    """The kept output, cut again if escaping inflates it, and how to see all of it when some was dropped."""
    body = captured.kept.decode("utf-8", errors="replace")
    shown = cut(body, limit)
    dropped = captured.total - len(shown.encode("utf-8", errors="replace"))
    if dropped <= 0 and len(shown) == len(body):
        return body
    redirect = ">" if stream == "stdout" else "2>"
    return shown + (f"\n[output truncated: {max(dropped, 0):,} more bytes of {captured.total:,}; run the command "
                    f"with `{redirect} out.txt` and read_file out.txt with offset to see it all]")
