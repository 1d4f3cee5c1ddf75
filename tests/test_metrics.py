"""`GET /metrics` on a real daemon: behind the token unless config.toml opens it, values from the store."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import httpx2
import pytest
from mcp import Client, StdioServerParameters
from prometheus_client.parser import text_string_to_metric_families

from agentqueue import daemon, paths, settings
from agentqueue.engine.adapters.base import RunResult
from agentqueue.services import Services
from agentqueue.services.lifecycle import Lifecycle

from .processes import wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

ECHO = shlex.join([sys.executable, "-c", "print('hi')"])


def env_for(home: Path) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "AGENTQUEUE_METRICS_PUBLIC"} | {
        "AGENTQUEUE_HOME": str(home), "AGENTQUEUE_PORT": "0"}


async def start_daemon(home: Path) -> str:
    """`agentqueue serve --port 0` in the background; returns its base URL once daemon.json names it."""
    subprocess.Popen([sys.executable, "-m", "agentqueue", "serve", "--port", "0"], env=env_for(home),
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    await wait_for(lambda: (daemon.read_daemon_info(home) or {}).get("http_url"), 30, "the daemon's HTTP URL")
    return daemon.read_daemon_info(home)["http_url"].removesuffix("/mcp")


def seed(home: Path) -> dict[str, str]:
    """Two projects with tasks in several states, two recorded runs, a ledger, hook runs; a paused agent
    (so the daemon registers none of its own and the engine starts nothing)."""
    svc = Services(home)
    try:
        svc.projects.create("Alpha")
        svc.projects.create("Beta")
        done = svc.tasks.create("alpha", "done", "d")
        failed = svc.tasks.create("alpha", "failed", "d")
        svc.tasks.create("alpha", "ready", "d")
        svc.tasks.create("alpha", "ready 2", "d")
        first = svc.tasks.create("beta", "first", "d")
        svc.tasks.create("beta", "waiting", "d", depends_on=[first.id])
        svc.agents.create("bot", "command", command=ECHO)
        svc.agents.set_paused("bot", True)
        lifecycle = Lifecycle(svc.store, svc.tasks, svc.usage)
        lifecycle.record_attempt(done.id, "bot", RunResult("completed", "ok", {"input": 100, "output": 20,
                                                                                 "cache_read": 5, "total": 125}, 0.5),
                                 2.0, [])
        lifecycle.record_attempt(failed.id, "bot", RunResult("failed", "no", {"input": 10, "output": 1, "total": 11},
                                                             0.25, "crash", "boom"), 40.0, [])
        svc.tasks.set_status(done.id, "COMPLETED")
        svc.tasks.set_status(failed.id, "BLOCKED")
        hook = svc.hooks.create("beta", "Nightly", {"type": "periodic", "interval_seconds": 86400},
                                action="create_task", task_template={"title": "t", "description": "d"},
                                enabled=False)
        for status in ("completed", "completed", "failed"):
            svc.hooks.finish_run(hook, svc.hooks.start_run(hook, "manual", None, "2026-01-01T00:00:00Z"), status)
        svc.hooks.record_skip(hook, "schedule", "overlap: skip")
        return {"done": done.id, "failed": failed.id}
    finally:
        svc.close()


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample as {(name, sorted labels): value}, parsed by prometheus-client's own parser."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def value(found: dict, name: str, **labels: str) -> float | None:
    return found.get((name, tuple(sorted(labels.items()))))


@pytest.mark.daemon
async def test_metrics_need_the_token_and_count_what_the_store_holds(live_home: Path) -> None:
    seed(live_home)
    base = await start_daemon(live_home)
    token = paths.token_path(live_home).read_text().strip()
    # Tool calls through the daemon (a plugin connection): two that succeed, one refused.
    params = StdioServerParameters(command=sys.executable, args=["-m", "agentqueue", "mcp"], env=env_for(live_home))
    async with Client(params, mode="legacy") as client:
        for _ in range(2):
            assert not (await client.call_tool("list_projects", {})).is_error
        assert (await client.call_tool("get_task", {"task_id": "ghost"})).is_error

    async with httpx2.AsyncClient() as http:
        denied = await http.get(f"{base}/metrics")
        assert denied.status_code == 401 and "Bearer" in denied.text
        assert (await http.get(f"{base}/metrics", headers={"Authorization": "Bearer nope"})).status_code == 401
        answer = await http.get(f"{base}/metrics", headers={"Authorization": f"Bearer {token}"})
        assert answer.status_code == 200, answer.text
        assert answer.headers["content-type"].startswith("text/plain")
        wrong_method = await http.post(f"{base}/metrics", headers={"Authorization": f"Bearer {token}"})
        assert wrong_method.status_code == 405
    found = samples(answer.text)

    assert value(found, "agentqueue_tasks", project="alpha", status="READY") == 2
    assert value(found, "agentqueue_tasks", project="alpha", status="COMPLETED") == 1
    assert value(found, "agentqueue_tasks", project="alpha", status="BLOCKED") == 1
    assert value(found, "agentqueue_tasks", project="beta", status="DEFINED") == 1
    assert value(found, "agentqueue_tasks", project="beta", status="READY") == 1
    assert value(found, "agentqueue_agents", agent_type="command", state="IDLE", paused="true") == 1

    assert value(found, "agentqueue_runs_total", project="alpha", outcome="completed") == 1
    assert value(found, "agentqueue_runs_total", project="alpha", outcome="failed") == 1
    assert value(found, "agentqueue_run_duration_seconds_count", project="alpha") == 2
    assert value(found, "agentqueue_run_duration_seconds_sum", project="alpha") == 42.0
    assert value(found, "agentqueue_run_duration_seconds_bucket", project="alpha", le="5.0") == 1
    assert value(found, "agentqueue_run_duration_seconds_bucket", project="alpha", le="60.0") == 2

    assert value(found, "agentqueue_tokens_total", project="alpha", kind="input") == 110
    assert value(found, "agentqueue_tokens_total", project="alpha", kind="output") == 21
    assert value(found, "agentqueue_tokens_total", project="alpha", kind="cache_read") == 5
    assert value(found, "agentqueue_cost_usd_total", project="alpha") == 0.75

    assert value(found, "agentqueue_hook_runs_total", project="beta", status="completed") == 2
    assert value(found, "agentqueue_hook_runs_total", project="beta", status="failed") == 1
    assert value(found, "agentqueue_hook_runs_total", project="beta", status="skipped") == 1

    calls = "agentqueue_tool_call_duration_seconds_count"
    assert value(found, calls, tool="list_projects", outcome="ok") == 2
    assert value(found, calls, tool="get_task", outcome="error") == 1
    assert (value(found, "agentqueue_tool_call_duration_seconds_sum", tool="list_projects", outcome="ok") or 0) > 0


@pytest.mark.daemon
async def test_metrics_are_public_when_the_config_says_so(live_home: Path) -> None:
    live_home.mkdir(parents=True)
    settings.config_path(live_home).write_text("[server]\nmetrics_public = true\n")
    base = await start_daemon(live_home)
    async with httpx2.AsyncClient() as http:
        answer = await http.get(f"{base}/metrics")
        assert answer.status_code == 200 and "agentqueue_tasks" in answer.text
        # Only the metrics: MCP itself still needs the token.
        assert (await http.post(f"{base}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})).status_code == 401


def test_metrics_public_is_validated_and_described(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTQUEUE_METRICS_PUBLIC", raising=False)
    rows = {r["key"]: r for r in settings.describe(settings.load(tmp_path))}
    assert (rows["server.metrics_public"]["value"], rows["server.metrics_public"]["source"]) == ("false", "default")
    settings.config_path(tmp_path).write_text("[server]\nmetrics_public = \"maybe\"\n")
    with pytest.raises(settings.ConfigError, match="metrics_public.*true or false"):
        settings.load(tmp_path)
    monkeypatch.setenv("AGENTQUEUE_METRICS_PUBLIC", "yes")
    loaded = settings.load(tmp_path)
    assert loaded.metrics_public is True
    assert {r["key"]: r for r in settings.describe(loaded)}["server.metrics_public"]["source"] == \
        "env AGENTQUEUE_METRICS_PUBLIC"
