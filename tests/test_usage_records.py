"""A run's usage record (engine/run_usage.py) outlives nothing: a daemon killed after a run ended but before the
record was removed left it behind for good (the soak's 200 tasks and 20 kills found one); the next daemon's start
removes every record no run will read."""

from __future__ import annotations

import json

import pytest

from agentqueue import paths
from agentqueue.engine import run_usage
from agentqueue.services import Services

from .test_engine_lifecycle import make_engine

pytestmark = pytest.mark.anyio


def test_a_record_left_by_a_run_that_had_ended_is_removed_when_the_next_daemon_starts(services: Services) -> None:
    services.projects.create("Demo")
    done = services.tasks.create("demo", "ran and landed", "d")
    record = run_usage.usage_path(services.home, done.id)
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps({"agent_id": "bot", "since": "2026-12-02T18:12:30.489Z",
                                  "tokens": {"input": 200, "output": 84, "total": 284}, "cost_usd": 0.003}))
    log = paths.task_log(services.home, done.id)
    log.write_text("the run's log stays\n")
    make_engine(services).recover()
    assert not record.exists()
    assert log.read_text() == "the run's log stays\n"  # only the usage records go
    assert services.store.scalar("SELECT count(*) FROM token_ledger") == 0  # nothing paid twice for it
