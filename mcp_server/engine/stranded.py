"""What the engine watches for between runs (issue 34): claims with no run behind them, and a home with no room.

**Stranded claims.** A run whose end could not be recorded (a store or log write failed: the home's disk was full)
left its task claimed (ASSIGNED, IN_PROGRESS, VERIFYING) with nothing running it, and its agent busy: only a
restart's recovery requeued such a task, so after the disk was freed the queue stopped short. `Stranded.sweep`
finds this daemon's claimed tasks that are in no run of its engine in two sweeps in a row (a claim is in the
engine's runs within a turn of its loop; the sweeps are SWEEP_SECONDS apart) and requeues them as recovery does: a
leftover process stopped, the work committed on the branch, a retry counted, the agent freed. An agent left busy
on a task whose run is over is freed the same way.

**Room.** No run is claimed while AgentQueue's home has less than MIN_FREE_BYTES free: a run needs its worktree,
its log and its store rows there, and one started on a full disk fails at once and spends a retry. The log says
when the home is full and when runs start again (a log on that full disk may not be written: get_status says it too,
services/system.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection
from pathlib import Path

from ..services import Services
from ..services.agents import release_agents
from ..services.system import MIN_FREE_BYTES, free_bytes
from ..services.task_states import CLAIMED, in_clause
from .recovery import Recovery

log = logging.getLogger("agentqueue.engine")

SWEEP_SECONDS = 10.0


class Stranded:
    def __init__(self, services: Services, recovery: Recovery, home: Path, owner: str,
                 running: Callable[[], Collection[str]]) -> None:
        self.services = services
        self.recovery = recovery
        self.home = home
        self.owner = owner
        self.running = running  # the tasks the engine has a run of, now
        self.every = SWEEP_SECONDS
        self._last = time.monotonic()
        self._tasks: set[str] = set()  # found stranded by the last sweep
        self._agents: set[str] = set()

    def sweep(self) -> list[str]:
        """Requeue the claims found stranded twice in a row, free the agents likewise; the tasks requeued."""
        if time.monotonic() - self._last < self.every:
            return []
        self._last = time.monotonic()
        store = self.services.store
        claimed, params = in_clause(CLAIMED)
        tasks = {r["id"] for r in store.all(f"SELECT id FROM tasks WHERE {claimed} AND owner = ?",
                                            (*params, self.owner))} - set(self.running())
        over, over_params = in_clause(CLAIMED, "t.status")
        agents = {r["id"] for r in store.all(
            f"SELECT a.id FROM agents a JOIN tasks t ON t.id = a.current_task WHERE a.state != 'IDLE' AND "
            f"t.owner = ? AND NOT {over}", (self.owner, *over_params))}
        again, self._tasks = tasks & self._tasks, tasks - self._tasks
        freed, self._agents = agents & self._agents, agents - self._agents
        requeued = []
        for task_id in sorted(again):
            if task_id in self.running():
                continue
            log.warning("task %s is claimed with no run behind it (its run's end could not be recorded): "
                        "requeued, its work kept", task_id)
            if self.recovery.requeue_here(task_id, self.home):
                requeued.append(task_id)
        for agent_id in sorted(freed):
            log.warning("agent %s was left busy after its run: freed", agent_id)
            with store.transaction():
                release_agents(store, agent_id=agent_id)
        return requeued


class Room:
    """Whether the home has room for a run; says so in the log when that changes."""

    def __init__(self, home: Path, min_free: int = MIN_FREE_BYTES) -> None:
        self.home = home
        self.min_free = min_free
        self.full = False

    def explains(self) -> bool:
        """Whether a failure can be the home's disk being full: the home is under its floor now. Measured, never read
        from the error's text, which carries names a run chose (a file called "No space left on device" would make
        every failed landing of its task a free rerun)."""
        free = free_bytes(self.home)
        return free is not None and free < self.min_free

    def enough(self) -> bool:
        free = free_bytes(self.home)
        full = free is not None and free < self.min_free
        if full and not self.full:
            log.warning("AgentQueue's home %s has %d KiB free (under %d MiB): no run starts until space is freed",
                        self.home, (free or 0) >> 10, self.min_free >> 20)
        elif self.full and not full:
            log.warning("AgentQueue's home %s has room again (%s MiB free): runs start again", self.home,
                        "?" if free is None else free >> 20)
        self.full = full
        return not full
