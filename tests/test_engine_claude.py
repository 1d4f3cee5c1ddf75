"""The engine running the REAL `claude` CLI against a loopback mock of the model API.

Real CLI, real git worktrees, real files; only the model's answers are scripted (mock_anthropic).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from agentqueue.services import Services

from .mock_anthropic import USAGE, MockAnthropic
from .git_fixtures import commit_file
from .engine_runs import engine_for, run_until  # noqa: F401  (imported from here by other modules)
from .processes import group_alive
from .test_merge_queue import CHECK, check_passes, first_parents
from .third_party import npm_bin
from .slowdown import scaled

CLAUDE = npm_bin("claude")
pytestmark = [pytest.mark.real_cli, pytest.mark.anyio, pytest.mark.integration,
              pytest.mark.skipif(CLAUDE is None, reason="claude CLI not installed (.ci/run installs it)")]


@pytest.fixture
def mock_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[MockAnthropic]:
    mock = MockAnthropic().start()
    (tmp_path / "user-home").mkdir()
    for key, value in {"HOME": str(tmp_path / "user-home"), "ANTHROPIC_API_KEY": "test-key",
                       "ANTHROPIC_BASE_URL": mock.base_url, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                       "DISABLE_TELEMETRY": "1", "CLAUDE_CODE_MAX_RETRIES": "0",
                       "AGENTQUEUE_CLAUDE_BIN": CLAUDE}.items():
        monkeypatch.setenv(key, value)
    yield mock
    mock.stop()


@pytest.fixture
def queue(services: Services, mock_api: MockAnthropic) -> Services:
    services.projects.create("Demo")
    services.repos.add("demo", "init", name="app")
    services.agents.create("claude", "claude-code")
    return services


def git(repo: str, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()


async def test_claude_writes_a_file_that_lands_on_the_default_branch(queue: Services, mock_api: MockAnthropic) -> None:
    task = queue.tasks.create("demo", "Say hello", "SCENARIO:write_file Create claude_hello.txt.", repo_id="app")
    engine = engine_for(queue)
    await run_until(engine, lambda: queue.tasks.get(task.id).status in ("COMPLETED", "BLOCKED", "PAUSED"))
    assert queue.tasks.get(task.id).status == "COMPLETED"
    repo = queue.repos.get("app").checkout_path
    assert git(repo, "show", "main:claude_hello.txt") == "hello from claude"
    assert not engine.workspaces.path_for("app", task.id).exists()  # the worktree was cleaned after landing
    assert git(repo, "branch", "--list", f"{task.id}/*") == ""  # and its branch deleted
    # Tokens: every request the mock answered reported USAGE; Claude Code sums them in modelUsage.
    requests = len(mock_api.messages_for("write_file"))
    attempts, result = queue.tasks.results(task.id)
    assert attempts == 1 and result is not None and result.status == "completed"
    assert result.tokens.model_dump() == {
        "input": USAGE["input_tokens"] * requests, "output": USAGE["output_tokens"] * requests,
        "cache_read": USAGE["cache_read_input_tokens"] * requests,
        "cache_write": USAGE["cache_creation_input_tokens"] * requests,
        "total": sum(USAGE.values()) * requests}
    assert result.cost_usd > 0 and result.files_changed == ["claude_hello.txt"]
    ledger = queue.usage.summary(task_id=task.id)["total"]
    assert ledger["total"] == result.tokens.total and ledger["cost_usd"] == pytest.approx(result.cost_usd)
    diff = queue.vcs.task_diff(queue.tasks.get(task.id))  # after landing, with the branch deleted
    assert diff["files_changed"] == ["claude_hello.txt"] and "+hello from claude" in diff["diff"]
    log = engine.log_path(task.id).read_text()
    assert "[tool] Bash" in log and "[done] completed" in log
    kinds = [e.event_type for e in queue.events.recent(50, task_id=task.id)]
    assert "task.started" in kinds and "task.completed" in kinds


async def test_rate_limit_parks_the_agent_kind_with_a_classification(queue: Services) -> None:
    """Issue 22: a limit parks claude-code agents for the whole queue (tests/test_parking.py); the task waits READY."""
    task = queue.tasks.create("demo", "Limited", "SCENARIO:rate_limit do anything", repo_id="app")
    engine = engine_for(queue)
    await run_until(engine, lambda: bool(queue.parking.parked()) and not engine.running)
    waiting = queue.tasks.get(task.id)
    assert waiting.status == "READY" and waiting.retry_count == 0
    parked = queue.parking.parked()
    assert [(p["agent_type"], p["reason"]) for p in parked] == [("claude-code", "rate_limit")]
    assert parked[0]["until"] is not None  # no reset time given: the backoff's end
    error = queue.tasks.agent_error(task.id)
    assert error["error_type"] == "Rate limited" and "429" in error["error_message"]


async def test_stop_task_kills_a_hung_run_within_two_seconds(queue: Services, mock_api: MockAnthropic) -> None:
    task = queue.tasks.create("demo", "Hangs", "SCENARIO:hang wait forever", repo_id="app")
    engine = engine_for(queue)
    async with anyio.create_task_group() as tg:
        tg.start_soon(engine.run)
        with anyio.fail_after(scaled(60)):
            while task.id not in engine.running or engine.running[task.id].pid is None:
                await anyio.sleep(0.05)
        with anyio.fail_after(scaled(60)):  # claude is at the model call that never answers
            while not mock_api.messages_for("hang"):
                await anyio.sleep(0.05)
        pid = engine.running[task.id].pid
        started = time.monotonic()
        previous, killed = await anyio.to_thread.run_sync(queue.tasks.stop, task.id)
        assert previous == "IN_PROGRESS" and killed
        with anyio.fail_after(scaled(2)):
            while group_alive(pid):
                await anyio.sleep(0.05)
        assert time.monotonic() - started < scaled(2)
        with anyio.fail_after(scaled(10)):
            while task.id in engine.running:
                await anyio.sleep(0.05)
        await engine.shutdown()
        tg.cancel_scope.cancel()
    assert queue.tasks.get(task.id).status == "BLOCKED"
    _, result = queue.tasks.results(task.id)
    assert result is not None and result.error_type == "killed"


def watchdog_notes(mock: MockAnthropic, scenario: str) -> list[int]:
    """Indexes of the scenario's requests whose conversation carries the watchdog's warning."""
    return [i for i, r in enumerate(mock.messages_for(scenario)) if "AgentQueue watchdog" in json.dumps(r["messages"])]


@pytest.mark.parametrize(("scenario", "pattern"), [("loop", "no progress"), ("ping_pong", "ping-pong")])
async def test_the_watchdog_warns_the_model_in_the_same_run_then_kills(queue: Services, mock_api: MockAnthropic,
                                                                      scenario: str, pattern: str) -> None:
    task = queue.tasks.create("demo", "Loops", f"SCENARIO:{scenario} keep going", repo_id="app", max_retries=0)
    engine = engine_for(queue)
    await run_until(engine, lambda: queue.tasks.get(task.id).status in ("BLOCKED", "COMPLETED"), timeout=120)
    assert queue.tasks.get(task.id).status == "BLOCKED"
    attempts, result = queue.tasks.results(task.id)
    assert attempts == 1 and result is not None and result.error_type == "loop"
    log = engine.log_path(task.id).read_text()
    assert f"[watchdog] {pattern}:" in log and "warned the agent in this run" in log and "killing the run" in log
    # The warning went into the run as a message: the model's next requests carry it, in one process.
    noted = watchdog_notes(mock_api, scenario)
    assert noted and noted[0] > 0 and len(mock_api.messages_for(scenario)) > noted[0]
    assert queue.tasks.agent_error(task.id)["error_type"] == "Loop detected"


async def test_a_refused_key_parks_claude_agents_with_the_fix_and_spends_no_retry(queue: Services) -> None:
    """A bad key (401) fails the same way for every task: issue 22 parks the kind (tests/test_parking.py) instead of
    blocking the task; the run is recorded once, with its error, and the fix says how to log in."""
    task = queue.tasks.create("demo", "Doomed", "SCENARIO:auth do anything", repo_id="app", max_retries=3)
    engine = engine_for(queue)
    await run_until(engine, lambda: bool(queue.parking.parked()) and not engine.running)
    waiting = queue.tasks.get(task.id)
    assert waiting.status == "READY" and waiting.retry_count == 0
    attempts, result = queue.tasks.results(task.id)
    assert attempts == 1 and result is not None and result.error_type == "auth"
    assert queue.store.scalar("SELECT count(*) FROM token_ledger WHERE task_id = ?", (task.id,)) == 1
    events = queue.events.recent(20, event_type="queue.parked")
    assert len(events) == 1 and events[0].payload["reason"] == "auth"
    for needle in ("claude auth login", "ANTHROPIC_API_KEY", "[agent_env]", "config.toml", "agentqueue resume"):
        assert needle in events[0].payload["fix"], (needle, events[0].payload["fix"])
    assert queue.tasks.agent_error(task.id)["error_type"] == "Authentication error"


@pytest.mark.parametrize(("scenario", "label", "needles"), [
    ("prompt_too_long", "Prompt too long", ("Split the task", "edit_task")),
])
async def test_a_failure_a_retry_cannot_fix_blocks_at_once_with_the_fix(queue: Services, scenario: str, label: str,
                                                                       needles: tuple[str, ...]) -> None:
    """An over-long prompt fails the same way every time: no retry, no tokens spent on one."""
    task = queue.tasks.create("demo", "Doomed", f"SCENARIO:{scenario} do anything", repo_id="app", max_retries=3)
    await run_until(engine_for(queue), lambda: queue.tasks.get(task.id).status in ("BLOCKED", "COMPLETED", "PAUSED"))
    held = queue.tasks.get(task.id)
    assert held.status == "BLOCKED" and held.retry_count == 0
    attempts, result = queue.tasks.results(task.id)
    assert attempts == 1 and result is not None and result.error_type == scenario
    assert queue.store.scalar("SELECT count(*) FROM token_ledger WHERE task_id = ?", (task.id,)) == 1
    assert [e.payload["reason"] for e in queue.events.recent(20, task_id=task.id, event_type="task.blocked")] == \
        [scenario]
    assert "not retried" in held.reason
    for needle in (*needles, f"restart_task {task.id}"):
        assert needle in held.next_step, (needle, held.next_step)
    error = queue.tasks.agent_error(task.id)
    assert error["error_type"] == label and error["suggested_fix"] == held.next_step
    assert error["error_message"] == result.error_message


def conversations(mock: MockAnthropic, needle: str) -> list[list[dict]]:
    """The message lists of the edit_region requests whose prompt holds `needle`, in the order they came."""
    return [r["messages"] for r in mock.messages_for("edit_region") if needle in json.dumps(r["messages"])]


def tokens_of(requests: int) -> dict[str, int]:
    """The ledger row of a run whose model answered `requests` times, each reporting USAGE."""
    return {"input": USAGE["input_tokens"] * requests, "output": USAGE["output_tokens"] * requests,
            "cache_read": USAGE["cache_read_input_tokens"] * requests,
            "cache_write": USAGE["cache_creation_input_tokens"] * requests, "total": sum(USAGE.values()) * requests}


async def test_claude_resolves_the_conflict_the_merge_queue_sent_back_and_it_lands(
        services: Services, mock_api: MockAnthropic, tmp_path: Path) -> None:
    """Two claude runs add a line at the same place (both branches leave the same main: the mock lets neither write
    before both have asked); the one that lands second conflicts and is sent back to its agent with the conflict
    in its prompt. The scripted model reads the hunk from that prompt and Edits that conflict (markers and both
    sides, as the hunk shows them) into both sides' lines; AgentQueue commits what it leaves and the resolution
    lands through the queue's check."""
    check = shlex.join([sys.executable, "-c", CHECK])  # the region intact, no conflict marker
    services.projects.create("Demo", max_concurrent_agents=2, verify_command=check)
    services.repos.add("demo", "init", name="app")
    repo = services.repos.get("app").checkout_path
    commit_file(Path(repo), "shared.txt", "BEGIN\nEND\n", "the region")
    for n in range(2):
        services.agents.create(f"claude-{n}", "claude-code")
    tasks = [services.tasks.create("demo", f"Line {n}", f"SCENARIO:edit_region TOGETHER[2] Add LINE[claude line {n}] "
                                   "to the region of shared.txt.", repo_id="app") for n in range(2)]
    engine = engine_for(services)
    await run_until(engine, lambda: all(services.tasks.get(t.id).status in ("COMPLETED", "BLOCKED", "PAUSED")
                                        for t in tasks), timeout=180)
    assert [services.tasks.get(t.id).status for t in tasks] == ["COMPLETED"] * 2, \
        [services.tasks.get(t.id).reason for t in tasks]
    # Both tasks' lines are on main, without a marker, and every commit since the region passes the check: its
    # first-parent commits, and the other parents (the tip the first landing left, which the queue also checked).
    final = git(repo, "show", "main:shared.txt").splitlines()
    assert final in (["BEGIN", "claude line 0", "claude line 1", "END"],
                     ["BEGIN", "claude line 1", "claude line 0", "END"])
    *landed, region = first_parents(Path(repo))  # main's first-parent commits, down to the region's
    commits = git(repo, "rev-list", f"{region}..main").split()
    assert set(landed) <= set(commits) and len(commits) >= 3  # both tasks' commits and the fix's merge
    assert all(check_passes(Path(repo), commit, check, tmp_path) for commit in commits)

    sent = [t for t in tasks if services.events.recent(50, task_id=t.id, event_type="task.sent_back")]
    assert len(sent) == 1
    fixer, first = sent[0], next(t for t in tasks if t is not sent[0])
    sends = services.events.recent(50, task_id=fixer.id, event_type="task.sent_back")
    assert len(sends) == 1 and sends[0].payload["kind"] == "conflict" and sends[0].payload["conflicts"] == [
        "shared.txt"]
    # The fix's prompt, as the model received it: the merge queue's section, the conflict with its markers and both
    # sides' lines, and the commit that landed meanwhile (the other task's).
    mine, theirs = (f"claude line {tasks.index(t)}" for t in (fixer, first))
    fixes = conversations(mock_api, "Sent back by the merge queue")
    assert fixes and all(f"LINE[{mine}]" in json.dumps(f) for f in fixes)
    prompt = "\n".join(b["text"] for b in fixes[0][0]["content"] if b.get("type") == "text")
    assert "## Sent back by the merge queue" in prompt and "conflicts with 'main' in shared.txt" in prompt
    hunk = prompt.split("### The conflicts (git diff)", 1)[1]
    assert "++<<<<<<< " in hunk and "++=======" in hunk and "++>>>>>>> " in hunk
    assert f" +{mine}" in hunk and f"+ {theirs}" in hunk  # its own side, and the side that landed
    # What landed: the first task's commit, and the queue's one commit on main for it (its merge).
    work = git(repo, "log", "--oneline", "--no-decorate", "-1", "--grep", f"^Line {tasks.index(first)}$", "main")
    merge = git(repo, "log", "--oneline", "--no-decorate", "-1", "--grep", f"^Merge task {first.id}:", "main")
    assert work and merge
    assert f"Commits that landed on 'main' since your branch left it: 2\n{merge}\n{work}" in prompt
    # The model answered with an Edit of exactly that conflict, and the Edit went through (one send back sufficed).
    edits = [b["input"] for r in fixes for m in r if m["role"] == "assistant" and isinstance(m["content"], list)
             for b in m["content"] if b.get("type") == "tool_use" and b["name"] == "Edit"]
    assert edits and edits[-1]["old_string"].startswith("<<<<<<< ") and sorted(
        edits[-1]["new_string"].splitlines()) == sorted([mine, theirs])
    # Two runs for the task sent back (its first and the fix), each in the ledger with the mock's tokens.
    requests = [len([r for r in conversations(mock_api, f"LINE[{mine}]") if ("Sent back by the merge queue" in
                                                                               json.dumps(r)) is fix])
                for fix in (False, True)]
    assert all(requests)
    rows = services.store.all("SELECT input, output, cache_read, cache_write, total FROM token_ledger "
                              "WHERE task_id = ? ORDER BY id", (fixer.id,))
    assert [dict(r) for r in rows] == [tokens_of(n) for n in requests]
    attempts = services.store.all("SELECT attempt, agent_id, status FROM task_results WHERE task_id = ? "
                                  "ORDER BY attempt", (fixer.id,))
    assert [(r["attempt"], r["status"]) for r in attempts] == [(1, "completed"), (2, "completed")]
    assert attempts[0]["agent_id"] == attempts[1]["agent_id"] == sends[0].payload["agent_id"]  # back to its agent
    kinds = [e.event_type for e in services.events.recent(50, task_id=fixer.id)]
    assert "task.sent_back" in kinds and "task.completed" in kinds
