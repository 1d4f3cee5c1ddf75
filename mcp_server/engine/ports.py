"""A free TCP port per running task, so two tasks' dev servers (and their checks) never collide.

A task holds its port from its run's start to its end, and the agent and its checks get it as
AGENTQUEUE_TASK_PORT (and under the repo's own `port_env`). Held ports live in memory only: a daemon that
restarts has no live run (recovery requeued every run of the last one and killed its processes), so
"recomputed from live runs" is the empty set, and the bind probe skips any port something on the machine
still listens on (a server a run left, another daemon's task, any other program).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

FIRST, COUNT = 20000, 1000  # 20000-20999: clear of the usual dev-server ports and of Linux's ephemeral range
ENV = "AGENTQUEUE_TASK_PORT"


class PortsExhaustedError(RuntimeError):
    pass


class Ports:
    def __init__(self, first: int = FIRST, count: int = COUNT) -> None:
        self.first, self.count = first, count
        self._held: dict[str, int] = {}
        self._next = 0  # round robin: a port just freed is the last to be handed out again
        self._lock = threading.Lock()

    def acquire(self, task_id: str, prefer: int | None = None) -> int:
        """The task's port: the one it holds, else `prefer` (the port its worktree was set up with) when free,
        else the next free one of the range that nothing on this machine listens on."""
        with self._lock:
            if task_id in self._held:
                return self._held[task_id]
            taken = set(self._held.values())
            if prefer is not None and self.first <= prefer < self.first + self.count and prefer not in taken \
                    and _bindable(prefer):
                self._held[task_id] = prefer
                return prefer
            for step in range(self.count):
                port = self.first + (self._next + step) % self.count
                if port not in taken and _bindable(port):
                    self._next = (port - self.first + 1) % self.count
                    self._held[task_id] = port
                    return port
        raise PortsExhaustedError(f"no free port in {self.first}-{self.first + self.count - 1} for task {task_id}")

    def release(self, task_id: str) -> None:
        with self._lock:
            self._held.pop(task_id, None)

    def of(self, task_id: str) -> int | None:
        """The port the task holds now, if any."""
        return self._held.get(task_id)

    @contextlib.contextmanager
    def holding(self, task_id: str, prefer: int | None = None) -> Iterator[int]:
        """The task's port for a while (a check or a teardown run outside the task's run): the one its run holds,
        else one held for the duration and freed after."""
        held = task_id in self._held
        port = self.acquire(task_id, prefer)
        try:
            yield port
        finally:
            if not held:
                self.release(task_id)


def env_for(port: int, name: str | None = None) -> dict[str, str]:
    """The variables that carry a task's port: AGENTQUEUE_TASK_PORT, and the repo's own name for it."""
    return {ENV: str(port), **({name: str(port)} if name else {})}


def _bindable(port: int) -> bool:
    """Nothing on this machine listens on (or holds) `port` on loopback right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
