"""The engine's side of parking (services/parking.py): which agent kinds this daemon must not start, parking a kind
when a run hit a failed login or a usage limit, and resuming it (at its reset time, or when a login check passes).

The runner stops a run at the first error line that says so (adapters/limits.py); the orchestrator hands the run's
task back to READY with its work saved and calls `park_run`. A kind is parked for the account this daemon gives it
(services/parking.account), so it follows the credentials, not the process.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

import anyio

from ..services import Services
from ..services.agents import find_cli
from ..services.login_probe import LoginCheck, check_login
from ..services.parking import PARKABLE, account, iso_at
from .adapters.base import RunResult
from .adapters.limits import PARKING_ERRORS

log = logging.getLogger("agentqueue.engine")


class QueueParking:
    def __init__(self, services: Services, backoff: tuple[float, float], check_seconds: float,
                 owner: str | None = None, check: Callable[[str, str | None, dict[str, str]], LoginCheck] = check_login
                 ) -> None:
        self.services = services
        self.parking = services.parking
        self.backoff = backoff  # (rate_limit_backoff, rate_limit_max_backoff)
        self.check_seconds = check_seconds  # the first login check; each next one waits twice as long
        self.owner = owner
        self.check = check

    def accounts(self) -> dict[str, str]:
        """kind -> the account this daemon's agents of that kind use (from the agents' environment)."""
        environment = self.services.settings.agent_environment
        return {kind: account(kind, environment(kind)) for kind in PARKABLE}

    def held(self) -> frozenset[str]:
        """The kinds the scheduler gives no task to (queue_state.py)."""
        return self.parking.held_kinds(self.accounts)

    @staticmethod
    def parks(agent_type: str, result: RunResult) -> bool:
        """Whether this run's end parks its kind rather than failing its task."""
        return agent_type in PARKABLE and result.status == "failed" and result.error_type in PARKING_ERRORS

    def park_run(self, agent_type: str, result: RunResult) -> bool:
        """Park the kind for the failure `result` names; True when this run parked it (its one event written)."""
        until = iso_at(result.resets_at) if result.resets_at else None
        row = self.parking.park(agent_type, self.accounts()[agent_type], str(result.error_type),
                                result.error_message or str(result.error_type), until=until, backoff=self.backoff,
                                check_in=self.check_seconds, owner=self.owner)
        if row:
            log.warning("agent kind %s parked (%s) until %s: %s", agent_type, row["reason"],
                        row["until"] or "a login check passes", row["message"])
        return row is not None

    def resume_due(self) -> None:
        """Limits whose reset time has come (any daemon may: it is only a time)."""
        for row in self.parking.resume("reset_time", due=True):
            log.info("agent kind %s resumed: its %s reset time %s came", row["agent_type"], row["reason"], row["until"])

    def _alive(self) -> set[str]:
        return {row["id"] for row in self.services.store.all("SELECT id FROM daemons WHERE lease_until >= ?",
                                                             (self.services.store.clock(),))}

    def release_orphans(self) -> bool:
        """Auth parkings of credentials no live daemon uses (the key was changed and the daemon restarted): nothing
        would ever check them, and the new key is not held by them; they resume ("check": that login is gone)."""
        resumed = False
        for row in self.parking.orphaned(self.accounts, self._alive if self.services.store.shared else None):
            if self.parking.resume("check", row["agent_type"], row["account"]):
                log.info("agent kind %s resumed: the credentials its login failed with are no longer used",
                         row["agent_type"])
                resumed = True
        return resumed

    def _due(self) -> tuple[bool, list[dict[str, Any]]]:
        return self.release_orphans(), self.parking.due_checks(self.accounts)

    async def check_logins(self) -> bool:
        """Check the logins parked for this daemon's accounts whose check is due; resume those that work. True when
        one resumed."""
        resumed, due = await anyio.to_thread.run_sync(self._due)  # one hop off the loop: usually two tiny reads
        for row in due:
            kind = row["agent_type"]
            env = self.services.settings.agent_environment(kind)
            result = await anyio.to_thread.run_sync(self.check, kind, find_cli(kind, self.services.settings), env)
            if result.ok:
                resume = functools.partial(self.parking.resume, "check", kind, row["account"])
                if await anyio.to_thread.run_sync(resume):
                    log.info("agent kind %s resumed: the login check passed (%s)", kind, result.detail)
                    resumed = True
                continue
            cap = max(self.backoff[1], self.check_seconds)
            wait = min(self.check_seconds * 2 ** (int(row["checks"] or 0) + 1), cap)
            log.info("agent kind %s still parked: %s; next check in %.0f s", kind, result.detail, wait)
            await anyio.to_thread.run_sync(self.parking.checked, kind, row["account"], wait)
        return resumed
