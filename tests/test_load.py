"""A short run of bench/load.py: 8 real plugin clients of one daemon, mixed reads and writes, while the
engine runs `command` tasks. No error of any kind (lock errors included), no acknowledged write lost.

The full 60 s run and its figures are in docs/benchmarks.md; this keeps the class closed in CI.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytestmark = [pytest.mark.daemon, pytest.mark.anyio, pytest.mark.integration]

BENCH = Path(__file__).resolve().parent.parent / "bench" / "load.py"


async def test_eight_clients_for_ten_seconds_lose_nothing(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("load_bench", BENCH)
    load = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(load)  # type: ignore[union-attr]
    figures = await load.run(clients=8, seconds=10, home=tmp_path)
    assert figures["errors"] == [] and figures["lock_errors"] == []
    assert figures["acknowledged_appends"] > 0 and figures["lost_appends"] == []
    assert figures["tasks_created"] > 0 and figures["tasks_in_store"] == figures["tasks_created"]
    assert figures["completed_meanwhile"] > 0, "the engine ran no task during the load"
