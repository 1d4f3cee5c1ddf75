"""What a run has used so far, kept on disk while it runs (issue 34), so that a run its daemon's death cut is paid for.

A daemon that is killed (SIGKILL, the OOM killer, a crash) never records the run it was reading: the stream's usage
lived only in its memory, and the next start's recovery requeued the task with nothing in the ledger for the model
responses that run had been served. So while a run goes on, the runner keeps `logs/tasks/<task>.usage.json` up to
date with what its stream has shown (each change, written whole and renamed into place); recovery records a partial
ledger row from it when the run's own record never came (no ledger row of the task since the run started), then
removes it. A run that ends as usual leaves the file to its engine, which removes it once the run is over.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from .. import paths
from ..store.db import now_iso
from .adapters.base import TOKEN_KEYS, RunResult, tokens

log = logging.getLogger("agentqueue.engine")


def usage_path(home: str | Path, task_id: str) -> Path:
    return paths.task_log(home, task_id).with_suffix(".usage.json")


class UsageCheckpoint:
    """The usage of one run as its stream shows it, on disk; `update` writes only what changed."""

    def __init__(self, path: Path, agent_id: str | None) -> None:
        self.path = path
        self.agent_id = agent_id
        self.since = now_iso()  # the run's own ledger row, when it comes, is stamped after this
        self._last: tuple[dict[str, int], float | None] | None = None

    def update(self, used: dict[str, int], cost_usd: float | None) -> None:
        if (used, cost_usd) == self._last or not any(used.get(k) for k in TOKEN_KEYS):
            return
        self._last = (dict(used), cost_usd)
        record = {"agent_id": self.agent_id, "since": self.since, "tokens": used, "cost_usd": cost_usd}
        part = self.path.with_name(self.path.name + ".part")
        try:
            part.write_text(json.dumps(record))
            os.replace(part, self.path)
        except OSError as error:  # a full disk: the run goes on, only its crash-time accounting is older
            log.debug("could not keep the usage of the run in %s: %s", self.path, error)


def discard(home: str | Path, task_id: str) -> None:
    try:
        usage_path(home, task_id).unlink(missing_ok=True)
    except OSError:
        pass


def sweep(home: str | Path) -> int:
    """At a daemon's start, after its predecessor's cut runs were paid for: the records no run will read (a daemon
    killed between a run's end and its record's removal left one); how many were removed."""
    removed = 0
    for path in usage_path(home, "x").parent.glob("*.usage.json"):
        try:
            path.unlink()
            removed += 1
        except OSError:
            pass
    return removed


def cut_run(home: str | Path, task_id: str) -> tuple[str | None, str, RunResult] | None:
    """The usage a run cut by its daemon's death had shown: (its agent, since when, a partial result), or None."""
    path = usage_path(home, task_id)
    try:
        record: dict[str, Any] = json.loads(path.read_text())
        used = tokens(*(int(record["tokens"].get(k, 0)) for k in ("input", "output", "cache_read", "cache_write")))
        cost = record.get("cost_usd")
        result = RunResult("failed", tokens=used, cost_usd=None if cost is None else float(cost), partial=True,
                           error_type="crashed", error_message="AgentQueue stopped while the agent was running")
        return record.get("agent_id"), str(record["since"]), result
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        log.warning("ignoring the usage record of %s: %s", task_id, error)
        return None
