"""What the services ask of the engine that runs beside them in this process, and what they do when none does.

The engine is built on the services (`Engine(services, home)`), so they cannot take its methods when they are
made. Instead `Services` makes one `EngineHooks`, hands it to the services that need the engine in their
constructors (Tasks, Hooks), and the engine connects its methods to it once, in its own constructor. Without
an engine (an in-memory server, a standalone server beside a daemon) every hook does nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..store.models import Task


class EngineHooks:
    def __init__(self) -> None:
        self._stop_run: Callable[[str], bool] | None = None
        self._land_approved: Callable[[Task], None] | None = None
        self._hook_runner: Any = None
        self._discard_branch: Callable[[Task], None] | None = None

    def connect(self, *, stop_run: Callable[[str], bool] | None = None,
                land_approved: Callable[[Task], None] | None = None, hook_runner: Any = None,
                discard_branch: Callable[[Task], None] | None = None) -> None:
        """The engine built on these services plugs in: how to kill a task's run, how to land an approved task's
        branch, its running hook runner (fire_hook goes through it), and how to discard a best-of-N candidate's kept
        branch. The engine built last wins."""
        self._stop_run, self._land_approved, self._hook_runner = stop_run, land_approved, hook_runner
        self._discard_branch = discard_branch

    def stop_run(self, task_id: str) -> bool:
        """Kill the task's agent process if one runs here; whether one did."""
        return self._stop_run(task_id) if self._stop_run is not None else False

    def land_approved(self, task: Task) -> None:
        """Merge an approved task's kept branch (raises ServiceError on a conflict); with no engine, nothing lands."""
        if self._land_approved is not None:
            self._land_approved(task)

    def discard_branch(self, task: Task) -> None:
        """Remove a deleted candidate's worktree and branch; with no engine the branch stays (git branch -D)."""
        if self._discard_branch is not None:
            self._discard_branch(task)

    @property
    def hook_runner(self) -> Any:
        """The engine's running HookRunner, or None when no engine runs in this process."""
        return self._hook_runner
