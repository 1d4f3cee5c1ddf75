"""Worktrees ready to run: what a repository's `.agentqueue.toml` (and `.worktreeinclude`) asks for each task's
worktree, done before the agent starts, and a port per running task.

At a run's start (`WorktreeSetup.start`, in the engine's start thread, after the task is IN_PROGRESS): the
declaration read from the default branch (services/repo_config.py), a port held for the run, and on a worktree
not yet set up the ignored files copied in (ignored_files.py) and the setup command run in the task's sandbox
(Files.run, as a verify command runs). A worktree that was set up has a small record in the home
(`worktree-setup/<repo>/<task>.json`, out of the sandbox's reach): its setup does not run again on a retry, its
teardown runs before it is removed (`teardown`, called by Workspaces.remove), even after a restart.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..services import Services
from ..services.errors import ServiceError
from ..services.repo_config import RepoConfig, RepoConfigError, read_commit, read_worktree
from ..store.models import Task
from .ignored_files import copy_ignored
from .ports import Ports, env_for
from .workspaces import Workspace, Workspaces

log = logging.getLogger("agentqueue.engine")

STATE_DIR = "worktree-setup"
TAIL = 500  # characters of a failed command's output kept in the task's error
LOGGED = 4000  # characters of each stream written to the task log


class NotReady(Exception):
    """The worktree could not be made ready: `kind` is the failure's error_type, the message says why."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass
class Readiness:
    """What a run starts with, for its environment and its prompt."""

    port: int
    env: dict[str, str]
    config: RepoConfig | None = None
    setup: str | None = None  # the setup command this worktree was set up with (now or on an earlier run)
    setup_now: bool = False  # it ran for this run
    copied: list[str] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)
    default_branch: str | None = None
    recorded: bool = False  # the worktree has a setup record (its teardown runs before it is removed)


class WorktreeSetup:
    def __init__(self, services: Services, home: Path, workspaces: Workspaces, ports: Ports,
                 log_line: Callable[[str, str], None], timeout: float) -> None:
        self.services = services
        self.root = home / STATE_DIR
        self.workspaces = workspaces
        self.ports = ports
        self.log_line = log_line
        self.timeout = timeout  # the task timeout: no command runs longer
        self.active: dict[str, Readiness] = {}  # the runs of this daemon, from start to end

    # -- a run's start and end -------------------------------------------------------------------------
    def start(self, task: Task, workspace: Workspace) -> Readiness:
        """Make the worktree ready (once per worktree) and hold the run's port; NotReady when it cannot be."""
        config, state = self._declaration(task, workspace)
        port = self.ports.acquire(task.id, prefer=state.get("port") if state else None)
        ready = Readiness(port, env_for(port, config.port_env if config else None), config,
                          default_branch=workspace.repo.default_branch if workspace.repo else None)
        self.active[task.id] = ready
        if state is not None:  # set up on an earlier run of this worktree
            ready.setup, ready.copied, ready.recorded = state.get("setup"), list(state.get("copied") or ()), True
            return ready
        if config is None or workspace.repo is None:
            return ready
        if not (config.patterns or config.setup or config.teardown):
            return ready
        if config.patterns:
            self._copy(task, workspace, ready)
        if config.setup:
            self._setup(task, workspace, config, ready)
        self._save(workspace, task.id, {"setup": config.setup, "teardown": config.teardown,
                                        "teardown_timeout": config.teardown_timeout, "port_env": config.port_env,
                                        "copied": ready.copied, "port": port})
        ready.recorded = True
        return ready

    def end(self, task_id: str) -> None:
        """The run is over: its port is free again."""
        self.active.pop(task_id, None)
        self.ports.release(task_id)

    @contextlib.contextmanager
    def task_env(self, task: Task, port_env: str | None = None) -> Iterator[dict[str, str]]:
        """The variables that carry a task's port, for a command run for it (a check of the merge queue): the port
        its run holds, else the one its worktree was set up with when that is free, else another, held while the
        `with` lasts. `port_env`: the repo's name for it (RepoConfig.port_env), when the caller read the file."""
        ready = self.active.get(task.id)
        state = self._load(task.repo_id, task.id) if ready is None and task.repo_id else None
        name = port_env or (ready.config.port_env if ready and ready.config else (state or {}).get("port_env"))
        with self.ports.holding(task.id, prefer=(state or {}).get("port")) as port:
            yield env_for(port, name)

    def _declaration(self, task: Task, workspace: Workspace) -> tuple[RepoConfig | None, dict[str, Any] | None]:
        """The default branch's declaration, and this worktree's setup record when it was set up before. A fresh
        worktree holds the default branch's files as they are (two lstat, the whole cost without them); a reused
        one may hold the agent's edits, so the default branch is read from git."""
        repo = workspace.repo
        if repo is None:
            return None, None
        try:
            if workspace.fresh:
                if task.branch:  # an earlier worktree of the task was removed: its record is not this one's
                    self._forget(repo.id, task.id)
                return read_worktree(workspace.path), None
            checkout = self.workspaces.checkout_of(repo)
            config = read_commit(checkout, f"refs/heads/{repo.default_branch}")
        except RepoConfigError as error:
            raise NotReady("repo_config", f"{error} Fix it on '{repo.default_branch}' of repo '{repo.id}'.") from None
        except ServiceError as error:
            raise NotReady("repo_config", f"Could not read .agentqueue.toml from '{repo.default_branch}' of repo "
                                          f"'{repo.id}': {error}") from None
        return config, self._load(repo.id, task.id)

    def _copy(self, task: Task, workspace: Workspace, ready: Readiness) -> None:
        assert workspace.repo is not None and ready.config is not None
        checkout = self.workspaces.checkout_of(workspace.repo)
        try:
            copied = copy_ignored(checkout, workspace.path, ready.config.patterns)
        except OSError as error:
            raise NotReady("setup_failed", f"Could not copy the ignored files .agentqueue.toml / .worktreeinclude "
                                           f"name from {checkout}: {error}") from None
        ready.copied, ready.refused = copied.files, copied.refused
        if copied.files:
            self.log_line(task.id, f"[setup] copied from {checkout}: {', '.join(copied.files[:50])}"
                                   + (f" and {len(copied.files) - 50} more" if len(copied.files) > 50 else ""))
        for path, why in copied.refused[:50]:
            self.log_line(task.id, f"[setup] not copied: {path} ({why})")

    def _setup(self, task: Task, workspace: Workspace, config: RepoConfig, ready: Readiness) -> None:
        assert config.setup is not None
        timeout = int(min(config.setup_timeout, self.timeout))
        started = time.monotonic()
        failure = self._command("setup", config.setup, workspace.path, timeout, task.id, ready.env)
        log.info("setup of %s took %.1f s%s", task.id, time.monotonic() - started, ": failed" if failure else "")
        if failure:
            raise NotReady("setup_failed", failure)
        ready.setup, ready.setup_now = config.setup, True

    def _command(self, what: str, command: str, cwd: Path, timeout: int, task_id: str,
                 env: dict[str, str]) -> str | None:
        """Run one of the repo's commands in the task's sandbox, its output in the task log; why it failed, if it
        did: the command, its exit code (or the timeout) and the tail of its output."""
        try:
            outcome = self.services.files.run(command, cwd, timeout, actor=what, task_id=task_id, env=env)
        except ServiceError as error:
            return f"the {what} command `{command}` could not run: {error}"
        self.log_line(task_id, f"[{what}] $ {command} -> {'timed out' if outcome.timed_out else outcome.returncode}"
                               f"\n{outcome.stdout[-LOGGED:]}{outcome.stderr[-LOGGED:]}")
        if outcome.returncode == 0:
            return None
        ended = f"timed out after {timeout} s" if outcome.timed_out else f"exited {outcome.returncode}"
        tail = (outcome.stderr.strip() or outcome.stdout.strip())[-TAIL:]
        return f"the {what} command `{command}` (.agentqueue.toml) {ended}" + (f": {tail}" if tail else "")

    # -- removal -------------------------------------------------------------------------------------------
    def teardown(self, workspace: Workspace) -> None:
        """Before a task's worktree is removed: the repo's teardown command, when the worktree was set up with one.
        A failure is logged and the removal goes on (the work has landed; a kept worktree helps no one)."""
        repo = workspace.repo
        if repo is None:
            return
        task_id = workspace.path.name
        ready = self.active.get(task_id)
        if ready is not None and not ready.recorded:
            return  # this daemon started the run and knows the worktree has no setup record: no file is read
        state = self._load(repo.id, task_id)
        if state is None:
            return
        command = state.get("teardown")
        if command and workspace.path.is_dir():
            timeout = int(min(int(state.get("teardown_timeout") or 60), self.timeout))
            with self.ports.holding(task_id, prefer=state.get("port")) as port:
                failure = self._command("teardown", command, workspace.path, timeout, task_id,
                                        env_for(port, state.get("port_env")))
            if failure:
                log.warning("task %s: %s", task_id, failure)
        self._forget(repo.id, task_id)

    # -- the setup record ----------------------------------------------------------------------------------
    def _state_path(self, repo_id: str, task_id: str) -> Path:
        return self.root / repo_id / f"{task_id}.json"

    def _load(self, repo_id: str, task_id: str) -> dict[str, Any] | None:
        try:
            data = json.loads(self._state_path(repo_id, task_id).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as error:
            log.warning("ignoring the setup record of %s: %s", task_id, error)
            return None
        return data if isinstance(data, dict) else None

    def _save(self, workspace: Workspace, task_id: str, record: dict[str, Any]) -> None:
        assert workspace.repo is not None
        path = self._state_path(workspace.repo.id, task_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        partial.write_text(json.dumps(record), encoding="utf-8")
        os.replace(partial, path)

    def _forget(self, repo_id: str, task_id: str) -> None:
        self._state_path(repo_id, task_id).unlink(missing_ok=True)
