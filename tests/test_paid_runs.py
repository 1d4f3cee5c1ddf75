"""Every run is paid for (issue 22): a real `claude` run that the watchdog, the timeout or stop_task kills has the
tokens it used in the ledger, equal to what the loopback model mock served it, marked partial; budgets, the usage
read and the CLI count them.

Real CLI, real worktrees, real SQLite; only the model's answers are scripted (mock_anthropic, scenario
busy_then_hang: two Bash calls, then a request that never gets an answer).
"""

from __future__ import annotations

import os
import time

import anyio
import pytest

from agentqueue.engine.adapters.prices import message_cost
from agentqueue.services import Services

from .cli_helpers import run_cli
from .mock_anthropic import MockAnthropic
from .test_engine_claude import CLAUDE, engine_for, mock_api, queue, run_until  # noqa: F401 (fixtures)
from .engine_runs import passes
from .slowdown import scaled

pytestmark = [pytest.mark.real_cli, pytest.mark.anyio, pytest.mark.integration,
              pytest.mark.skipif(CLAUDE is None, reason="claude CLI not installed (.ci/run installs it)")]

BUSY = "SCENARIO:busy_then_hang STEPS[2] keep working"


def ledger_rows(services: Services, task_id: str) -> list[dict]:
    return [dict(r) for r in services.store.all(
        "SELECT input, output, cache_read, cache_write, total, cost_usd, partial FROM token_ledger WHERE task_id = ? "
        "ORDER BY id", (task_id,))]


def served_cost(mock: MockAnthropic, needle: str) -> float:
    """What the served responses cost at their model's published price (the CLI's own figure for a whole run)."""
    with mock.lock:
        served = [s for s in mock.served if needle in str(s["request"].get("messages"))]
    return sum(message_cost(s["model"], s["usage"]) or 0 for s in served)


def assert_paid_for(services: Services, mock: MockAnthropic, task_id: str, marker: str, error_type: str) -> dict:
    """The run failed as `error_type`, and its one ledger row holds what the mock served it, marked partial."""
    _, result = services.tasks.results(task_id)
    assert result is not None and result.error_type == error_type and result.partial
    served = mock.served_tokens(marker)
    assert served["total"] > 0, "the mock served the run before it was cut short"
    [row] = ledger_rows(services, task_id)
    assert {k: row[k] for k in served} == served, (row, served)
    assert row["partial"] == 1 and row["cost_usd"] == pytest.approx(served_cost(mock, marker))
    assert result.tokens.model_dump() == served and result.cost_usd == pytest.approx(row["cost_usd"])
    return row


async def wait_for_hang(mock: MockAnthropic, marker: str, requests: int = 3, timeout: float = 90) -> None:
    """Until the run's request after its two Bash calls is in (and never answered)."""
    with anyio.fail_after(scaled(timeout)):
        while len([r for r in mock.requests if marker in str(r.get("messages"))]) < requests:
            await anyio.sleep(0.05)


async def test_a_stalled_run_is_paid_for_and_its_project_budget_counts_it(queue: Services,
                                                                         mock_api: MockAnthropic) -> None:
    task = queue.tasks.create("demo", "Stalls", f"{BUSY} STALLED", repo_id="app", max_retries=0)
    engine = engine_for(queue, stall=10)  # longer than a loaded machine takes to start the CLI
    await run_until(engine, lambda: queue.tasks.get(task.id).status in ("BLOCKED", "COMPLETED"), timeout=120)
    assert "no output for 10 s: stalled; killing" in engine.log_path(task.id).read_text()
    row = assert_paid_for(queue, mock_api, task.id, "STALLED", "stalled")

    # The budget: the project's rolling 24 h window holds the partial run, and at that limit nothing more starts.
    assert queue.usage.window_totals(24)["demo"] == row["total"]
    queue.projects.edit("demo", budget_limit=row["total"])
    waiting = queue.tasks.create("demo", "Over budget", "SCENARIO:write_file never runs", repo_id="app")
    engine = engine_for(queue)
    async with anyio.create_task_group() as tg:
        tg.start_soon(engine.run)
        await passes(engine, 10)  # several scheduler passes
        await engine.shutdown()
        tg.cancel_scope.cancel()
    assert queue.tasks.get(waiting.id).status == "READY"
    assert not mock_api.messages_for("write_file")

    # get_token_usage's figures (the service the tool, the board and `agentqueue usage` read) say they hold it.
    usage = queue.usage.summary(project_id="demo")
    assert usage["total"]["total"] == row["total"] and usage["total"]["partial_runs"] == 1
    assert [b["partial_runs"] for b in usage["breakdown"]] == [1]
    env = {**os.environ, "AGENTQUEUE_HOME": str(queue.home)}
    shown = run_cli(env, "usage", "--project", "demo")
    assert shown.returncode == 0, shown.stderr
    assert f"{row['total']:,}" in shown.stdout and "includes 1 partial run(s)" in shown.stdout
    task_shown = run_cli(env, "show", task.id)
    assert task_shown.returncode == 0, task_shown.stderr
    assert f"{row['total']:,} tokens" in task_shown.stdout and "partial: counted up to where" in task_shown.stdout


async def test_a_run_stopped_by_stop_task_is_paid_for(queue: Services, mock_api: MockAnthropic) -> None:
    task = queue.tasks.create("demo", "Stopped", f"{BUSY} STOPPED", repo_id="app")
    engine = engine_for(queue)
    async with anyio.create_task_group() as tg:
        tg.start_soon(engine.run)
        await wait_for_hang(mock_api, "STOPPED")
        previous, killed = await anyio.to_thread.run_sync(queue.tasks.stop, task.id)
        assert previous == "IN_PROGRESS" and killed
        with anyio.fail_after(scaled(15)):
            while task.id in engine.running:
                await anyio.sleep(0.05)
        await engine.shutdown()
        tg.cancel_scope.cancel()
    assert_paid_for(queue, mock_api, task.id, "STOPPED", "killed")


async def test_a_run_that_timed_out_is_paid_for(queue: Services, mock_api: MockAnthropic) -> None:
    task = queue.tasks.create("demo", "Times out", f"{BUSY} TIMED_OUT", repo_id="app", max_retries=0)
    engine = engine_for(queue, timeout=20)  # the stall limit (60 s) is never reached first
    started = time.monotonic()
    await run_until(engine, lambda: queue.tasks.get(task.id).status in ("BLOCKED", "COMPLETED"), timeout=120)
    assert time.monotonic() - started >= 20
    assert "wall-clock timeout after 20 s" in engine.log_path(task.id).read_text()
    assert_paid_for(queue, mock_api, task.id, "TIMED_OUT", "timeout")


async def test_a_run_killed_as_a_loop_is_paid_for(queue: Services, mock_api: MockAnthropic) -> None:
    """Twenty identical Bash calls: the loop detector kills the run at the response that made the twentieth."""
    task = queue.tasks.create("demo", "Loops", "SCENARIO:loop LOOPED keep going", repo_id="app", max_retries=0)
    await run_until(engine_for(queue), lambda: queue.tasks.get(task.id).status in ("BLOCKED", "COMPLETED"),
                    timeout=180)
    assert_paid_for(queue, mock_api, task.id, "LOOPED", "loop")


async def test_a_run_the_daemons_shutdown_stopped_is_paid_for_though_it_is_no_attempt(
        queue: Services, mock_api: MockAnthropic) -> None:
    """Shutdown requeues the task without counting an attempt (it runs again later); what it used is in the ledger."""
    task = queue.tasks.create("demo", "Shut down", f"{BUSY} SHUTDOWN", repo_id="app")
    engine = engine_for(queue)
    async with anyio.create_task_group() as tg:
        tg.start_soon(engine.run)
        await wait_for_hang(mock_api, "SHUTDOWN")
        await engine.shutdown()
        tg.cancel_scope.cancel()
    assert queue.tasks.get(task.id).status == "READY" and queue.tasks.results(task.id) == (0, None)
    served = mock_api.served_tokens("SHUTDOWN")
    [row] = ledger_rows(queue, task.id)
    assert served["total"] > 0 and {k: row[k] for k in served} == served and row["partial"] == 1
    assert row["cost_usd"] == pytest.approx(served_cost(mock_api, "SHUTDOWN"))
