"""The soak that kills things (bench/soak.py, issue 34), short: 12 tasks, 3 SIGKILLs of the daemon (mid-migration,
mid-landing, mid-worktree-creation), each restarted by a client's plugin, and, where this machine lets a test mount
one, AGENTQUEUE_HOME on a small tmpfs that the soak fills mid-run. Every invariant the full soak checks is asserted
here; the full one (200 tasks, 20 kills) is `python bench/soak.py`, its figures in docs/benchmarks.md.

Waits are on the store's states and events and on files, each with a deadline scaled by AGENTQUEUE_TEST_SLOWDOWN.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from bench.soak import Soak, SoakConfig, can_mount_tmpfs, table

from .third_party import npm_bin

pytestmark = [pytest.mark.slow, pytest.mark.daemon, pytest.mark.integration, pytest.mark.xdist_group("soak"),
              *([pytest.mark.real_cli] if npm_bin("claude") else [])]

NO_TMPFS = can_mount_tmpfs()


@pytest.fixture(scope="module")
def soak(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One short soak for the module's tests: its figures."""
    config = SoakConfig(tasks=12, kills=3, plan=["migration", "landing", "worktree"], seed=7,
                        history_rows=60_000, tmpfs_mb=None if NO_TMPFS else 64, claude_only_pinned=True,
                        deadline_s=240, root=tmp_path_factory.mktemp("soak") / "run", inspect=False,
                        verbose=True)
    figures = anyio.run(Soak(config).run)
    print(table(figures))
    return figures


def test_every_task_lands_once_through_three_kills_and_nothing_is_left_behind(soak: dict[str, Any]) -> None:
    assert soak["failures"] == [], "\n".join(soak["failures"])
    assert soak["kills"] == 3 and soak["restarts"] == 3
    assert soak["kills_by_phase"] == {"migration": 1, "landing": 1, "worktree": 1}
    assert soak["landed"] == soak["tasks"] == 12, soak
    assert soak["duplicates"] == soak["lost_work"] == soak["orphans"] == 0
    assert soak["red_first_parent_commits"] == 0 and soak["first_parent_commits"] >= 2
    assert soak["store_integrity"] == "ok"
    # The ledger equals what the mock served, task by task, but for responses a kill cut (each named in failures
    # otherwise); at most one per kill.
    assert soak["ledger_tokens"] <= soak["mock_served_tokens"] and soak["responses_cut_by_a_kill"] <= 3
    migration = soak["kill_log"][0]
    assert migration["phase"] == "migration" and migration["hit"], migration


@pytest.mark.skipif(NO_TMPFS is not None, reason=f"no tmpfs for the home: {NO_TMPFS}")
def test_a_full_home_says_so_keeps_its_store_whole_and_resumes_once_freed(soak: dict[str, Any]) -> None:
    fill = soak["fill"]
    assert fill is not None, "the soak never filled its tmpfs"
    assert fill["daemon_alive_when_full"] and fill["integrity_when_full"] == "ok"
    assert "no run starts until" in fill["get_status"] and "free" in fill["get_status"]
    assert fill["stuck"] == 0
    assert soak["landed"] == soak["tasks"]

