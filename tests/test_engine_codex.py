"""The engine running the REAL `codex` CLI (a second agent type) against a loopback Responses-API mock."""

from __future__ import annotations

import subprocess
from pathlib import Path

import anyio
import pytest

from agentqueue.engine.orchestrator import Engine, EngineConfig
from agentqueue.services import Services

from . import mock_openai as mock
from .third_party import npm_bin
from .slowdown import scaled

CODEX = npm_bin("codex")
pytestmark = [pytest.mark.real_cli, pytest.mark.anyio, pytest.mark.integration,
              pytest.mark.skipif(CODEX is None, reason="codex CLI not installed (.ci/run installs it)")]


@pytest.fixture
def codex_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    api = mock.MockOpenAI().start()
    for key, value in {**mock.codex_home(tmp_path, api.base_url), "AGENTQUEUE_CODEX_BIN": CODEX}.items():
        monkeypatch.setenv(key, value)
    yield api
    api.stop()


@pytest.fixture
def codex_queue(services: Services, codex_api: mock.MockOpenAI):
    services.projects.create("Demo")
    services.repos.add("demo", "init", name="app")
    services.agents.create("codex", "codex")
    return services


async def run_until_settled(services: Services, task_id: str) -> Engine:
    engine = Engine(services, services.home, config=EngineConfig(poll_seconds=0.1, rate_limit_backoff=30))
    async with anyio.create_task_group() as tg:
        tg.start_soon(engine.run)
        with anyio.fail_after(scaled(90)):
            while services.tasks.get(task_id).status not in ("COMPLETED", "BLOCKED", "PAUSED"):
                await anyio.sleep(0.1)
        await engine.shutdown()
        tg.cancel_scope.cancel()
    return engine


async def test_codex_task_lands_its_file_with_exact_tokens(codex_queue: Services) -> None:
    task = codex_queue.tasks.create("demo", "Hello from codex", f"SCENARIO:write_file create {mock.WRITE_FILE_NAME}",
                                    repo_id="app")
    engine = await run_until_settled(codex_queue, task.id)
    assert codex_queue.tasks.get(task.id).status == "COMPLETED", engine.log_path(task.id).read_text()
    repo = codex_queue.repos.get("app").checkout_path
    shown = subprocess.run(["git", "show", f"main:{mock.WRITE_FILE_NAME}"], cwd=repo, capture_output=True, text=True)
    assert shown.stdout == mock.WRITE_FILE_CONTENT
    usage = mock.expected_turn_usage("tool_call", "final")
    _, result = codex_queue.tasks.results(task.id)
    assert result is not None and result.tokens.model_dump() == {
        "input": usage["input_tokens"] - usage["cached_input_tokens"], "output": usage["output_tokens"],
        "cache_read": usage["cached_input_tokens"], "cache_write": 0,
        "total": usage["input_tokens"] + usage["output_tokens"]}
    assert result.files_changed == [mock.WRITE_FILE_NAME]
    assert "[tool] shell" in engine.log_path(task.id).read_text()


async def test_codex_rate_limit_parks_codex_agents_and_the_task_stays_ready(codex_queue: Services) -> None:
    """Issue 22: a limit parks the agent kind for the whole queue (engine/parking.py), the task waits READY."""
    task = codex_queue.tasks.create("demo", "Limited", "SCENARIO:rate_limit anything", repo_id="app")
    engine = Engine(codex_queue, codex_queue.home, config=EngineConfig(poll_seconds=0.1, rate_limit_backoff=30))
    async with anyio.create_task_group() as tg:
        tg.start_soon(engine.run)
        with anyio.fail_after(scaled(90)):
            while not codex_queue.parking.parked() or engine.running:
                await anyio.sleep(0.1)
        await engine.shutdown()
        tg.cancel_scope.cancel()
    current = codex_queue.tasks.get(task.id)
    assert current.status == "READY" and current.retry_count == 0
    assert [(p["agent_type"], p["reason"]) for p in codex_queue.parking.parked()] == [("codex", "rate_limit")]
    assert codex_queue.tasks.agent_error(task.id)["error_type"] == "Rate limited"
