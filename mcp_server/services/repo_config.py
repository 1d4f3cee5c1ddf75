"""What a repository declares its task worktrees need, in `.agentqueue.toml` at its root (and Claude Code's
`.worktreeinclude`): a setup and a teardown command, gitignored files to copy in, a port variable, the checks.

    setup = "npm ci"                         # once in each new worktree, before the agent (in the sandbox)
    setup_timeout = 600                      # seconds, 1-600 (default 600)
    teardown = "docker compose down -v"      # before the worktree is removed
    teardown_timeout = 60                    # seconds, 1-600 (default 60)
    copy = [".env", "config/*.local.json"]   # gitignored files of the checkout to copy (.gitignore patterns)
    port_env = "PORT"                        # the task's port under this name too (always AGENTQUEUE_TASK_PORT)

    [[checks]]                               # run before landing, in order; else the project's verify_command
    name = "tests"
    command = "npm test"
    timeout = 600                            # seconds, 1-600 (default 600)

Both files are read from the default branch, never from a task's branch: a fresh worktree holds exactly the
default branch's files (`read_worktree`, one lstat each: the usual path); anything else reads the commit
(`read_commit`). An agent can change neither what sets its worktree up nor the checks that judge it.
"""

from __future__ import annotations

import os
import re
import stat
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..store.models import Project, Repo
from . import gitops
from .errors import ServiceError

FILE = ".agentqueue.toml"
INCLUDE_FILE = ".worktreeinclude"  # Claude Code's: .gitignore patterns of ignored files to copy into worktrees
MAX_TIMEOUT = 600  # what Files.run allows a command
MAX_BYTES = 64 * 1024  # either file: a declaration, not data
MAX_PATTERNS = 200
MAX_CHECKS = 20
KEYS = ("setup", "setup_timeout", "teardown", "teardown_timeout", "copy", "port_env", "checks")
CHECK_KEYS = ("name", "command", "timeout")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
# Names a port must never overwrite: what finds programs, libraries and the agent's own state.
_RESERVED_ENV = frozenset({"PATH", "HOME", "USER", "SHELL", "TMPDIR", "PWD", "LD_PRELOAD", "LD_LIBRARY_PATH",
                           "PYTHONPATH", "NODE_OPTIONS", "AGENTQUEUE_HOME"})


class RepoConfigError(ServiceError):
    """The repository's .agentqueue.toml or .worktreeinclude cannot be used; the message says what to fix."""


@dataclass(frozen=True)
class Check:
    """One command that must pass before a task's work lands."""

    name: str
    command: str
    timeout: int = MAX_TIMEOUT


@dataclass(frozen=True)
class RepoConfig:
    setup: str | None = None
    setup_timeout: int = MAX_TIMEOUT
    teardown: str | None = None
    teardown_timeout: int = 60
    copy: tuple[str, ...] = ()  # .agentqueue.toml's `copy`
    include: tuple[str, ...] = ()  # .worktreeinclude's lines
    port_env: str | None = None
    checks: tuple[Check, ...] = ()
    sources: tuple[str, ...] = field(default=(), compare=False)  # the files it was read from

    @property
    def patterns(self) -> tuple[str, ...]:
        """Every pattern of ignored files to copy: the toml's `copy`, then .worktreeinclude's lines."""
        return self.copy + self.include


def parse(text: str) -> RepoConfig:
    """`.agentqueue.toml`'s text, checked; a RepoConfigError names the key and what it takes."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise RepoConfigError(f"{FILE} is not valid TOML ({error}).") from None
    unknown = [k for k in data if k not in KEYS]
    if unknown:
        raise RepoConfigError(f"{FILE} has an unknown key {unknown[0]!r}; the keys are {', '.join(KEYS)}.")
    return RepoConfig(setup=_command(data, "setup"), setup_timeout=_timeout(data, "setup_timeout", MAX_TIMEOUT),
                      teardown=_command(data, "teardown"), teardown_timeout=_timeout(data, "teardown_timeout", 60),
                      copy=tuple(_patterns(data.get("copy", []))), port_env=_port_env(data.get("port_env")),
                      checks=tuple(_checks(data.get("checks", []))), sources=(FILE,))


def parse_include(text: str) -> tuple[str, ...]:
    """`.worktreeinclude`'s patterns (.gitignore syntax: blank lines and `#` comments are skipped)."""
    lines = [line.strip() for line in text.splitlines()]
    patterns = [line for line in lines if line and not line.startswith("#")]
    if len(patterns) > MAX_PATTERNS:
        raise RepoConfigError(f"{INCLUDE_FILE} has {len(patterns)} patterns; at most {MAX_PATTERNS} are read.")
    return tuple(patterns)


def _command(data: dict[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise RepoConfigError(f"{FILE}: {key} must be a non-empty command string, e.g. {key} = \"make {key}\".")
    if "\0" in value or len(value) > 10_000:
        raise RepoConfigError(f"{FILE}: {key} must be at most 10,000 characters with no NUL byte.")
    return value


def _timeout(data: dict[str, Any], key: str, default: int) -> int:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TIMEOUT:
        raise RepoConfigError(f"{FILE}: {key} must be a whole number of seconds from 1 to {MAX_TIMEOUT} "
                              f"(got {value!r}).")
    return value


def _patterns(value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise RepoConfigError(f"{FILE}: copy must be a list of paths or .gitignore patterns, e.g. "
                              "copy = [\".env\", \"config/*.local.json\"].")
    if len(value) > MAX_PATTERNS:
        raise RepoConfigError(f"{FILE}: copy has {len(value)} entries; at most {MAX_PATTERNS}.")
    for pattern in value:
        bare = pattern.strip().removeprefix("!")
        if "\0" in bare or "\n" in bare or ".." in bare.split("/"):
            raise RepoConfigError(f"{FILE}: copy entry {pattern!r} leaves the repository; give a path inside it "
                                  "(a leading / means its root).")
    return [p.strip() for p in value]


def _port_env(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not _ENV_NAME.fullmatch(value) or value.upper() in _RESERVED_ENV:
        raise RepoConfigError(f"{FILE}: port_env must be an environment variable name such as \"PORT\" (letters, "
                              f"digits and _; not {', '.join(sorted(_RESERVED_ENV))}); got {value!r}.")
    return value


def _checks(value: Any) -> list[Check]:
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise RepoConfigError(f"{FILE}: checks must be tables, e.g. [[checks]] name = \"tests\" "
                              "command = \"make test\".")
    if len(value) > MAX_CHECKS:
        raise RepoConfigError(f"{FILE}: {len(value)} checks; at most {MAX_CHECKS}.")
    checks = []
    for number, table in enumerate(value, 1):
        unknown = [k for k in table if k not in CHECK_KEYS]
        if unknown:
            raise RepoConfigError(f"{FILE}: check {number} has an unknown key {unknown[0]!r}; a check takes "
                                  f"{', '.join(CHECK_KEYS)}.")
        command = _command(table, "command")
        if command is None:
            raise RepoConfigError(f"{FILE}: check {number} has no command; add command = \"...\".")
        name = table.get("name", f"check {number}")
        if not isinstance(name, str) or not name.strip() or len(name) > 100:
            raise RepoConfigError(f"{FILE}: check {number}'s name must be a short text (at most 100 characters).")
        checks.append(Check(name.strip(), command, _timeout(table, "timeout", MAX_TIMEOUT)))
    return checks


def _assemble(toml: str | None, include: str | None) -> RepoConfig | None:
    if toml is None and include is None:
        return None
    config = parse(toml) if toml is not None else RepoConfig()
    if include is None:
        return config
    sources = (*config.sources, INCLUDE_FILE)
    return RepoConfig(**{**config.__dict__, "include": parse_include(include), "sources": sources})


# -- reading -------------------------------------------------------------------------------------------------
def read_worktree(path: Path) -> RepoConfig | None:
    """Both files of a worktree fresh from the default branch (nothing has run in it yet), or None when it has
    neither: one lstat each, the whole cost for a repo without them. A file that is a symlink is refused."""
    texts = [_read_regular(path / name) for name in (FILE, INCLUDE_FILE)]
    return _assemble(*texts)


def _read_regular(file: Path) -> str | None:
    try:
        info = os.lstat(file)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise RepoConfigError(f"{file.name} could not be read ({error.strerror}).") from None
    if not stat.S_ISREG(info.st_mode):
        raise RepoConfigError(f"{file.name} must be a regular file at the repository's root, not a symlink or a "
                              "folder.")
    if info.st_size > MAX_BYTES:
        raise RepoConfigError(f"{file.name} is {info.st_size:,} bytes; at most {MAX_BYTES:,}.")
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except OSError as error:
        raise RepoConfigError(f"{file.name} could not be read ({error.strerror}).") from None
    return _text(file.name, data)


def _text(name: str, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise RepoConfigError(f"{name} is not UTF-8 text.") from None


def read_commit(checkout: Path, ref: str) -> RepoConfig | None:
    """Both files as commit `ref` of the repository at `checkout` has them, or None when it has neither: one
    `ls-tree` (and a `cat-file` per file found). A symlink or a submodule there is refused."""
    main = gitops.Checkout(checkout, known=True)
    listing = main.run_bytes("ls-tree", "-z", "--full-tree", "--end-of-options", ref, "--", FILE, INCLUDE_FILE)
    found: dict[str, str] = {}
    for entry in filter(None, listing.split(b"\0")):
        meta, _, raw = entry.partition(b"\t")
        mode, kind, sha = meta.decode().split()
        path = raw.decode("utf-8", "surrogateescape")
        if kind != "blob" or mode not in ("100644", "100755"):
            raise RepoConfigError(f"{path} must be a regular file at the repository's root, not a symlink or a "
                                  "folder.")
        found[path] = sha
    if not found:
        return None
    texts: list[str | None] = []
    for name in (FILE, INCLUDE_FILE):
        if name not in found:
            texts.append(None)
            continue
        data = main.run_bytes("cat-file", "blob", found[name])
        if len(data) > MAX_BYTES:
            raise RepoConfigError(f"{name} is {len(data):,} bytes; at most {MAX_BYTES:,}.")
        texts.append(_text(name, data))
    return _assemble(*texts)


# -- for the merge queue ---------------------------------------------------------------------------------
def declaration(repo: Repo, checkout: Path | None = None) -> RepoConfig | None:
    """The repo's declaration as its default branch has it now (None: neither file). `checkout`: where to read the
    repo (Workspaces.checkout_of in team mode; default its checkout_path). RepoConfigError when it cannot be used."""
    return read_commit(checkout or Path(repo.checkout_path), f"refs/heads/{repo.default_branch}")


def checks_for(repo: Repo, project: Project, checkout: Path | None = None) -> list[Check]:
    """The checks a task's work in `repo` must pass before it lands: the repo's declared `[[checks]]` on its
    default branch, else the project's verify_command (as one check named "verify"), else none.
    Raises RepoConfigError when the default branch's .agentqueue.toml cannot be used."""
    return declared_checks(declaration(repo, checkout), project)


def declared_checks(config: RepoConfig | None, project: Project) -> list[Check]:
    """The rule itself: a repo's declared checks, else the project's verify_command, else none."""
    if config is not None and config.checks:
        return list(config.checks)
    if project.verify_command:
        return [Check("verify", project.verify_command, MAX_TIMEOUT)]
    return []
