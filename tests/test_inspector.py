"""MCP Inspector's CLI (a third-party client) against the real plugin -> daemon path."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentqueue import daemon

from .third_party import npm_bin

pytestmark = [pytest.mark.daemon, pytest.mark.integration]
INSPECTOR = npm_bin("mcp-inspector")
needs_inspector = pytest.mark.skipif(INSPECTOR is None, reason="mcp-inspector not installed (.ci/run installs it)")


@pytest.fixture
def inspect(tmp_path: Path) -> Iterator:
    home = tmp_path / "home"

    def run(*args: str, era: str = "legacy") -> tuple[int, dict]:
        # The Inspector gives servers a minimal environment, so the home is passed explicitly (-e).
        cmd = [INSPECTOR, "--cli", "-q", "--format", "json",
               "--protocol-era", era, "-e", f"AGENTQUEUE_HOME={home}", "-e", "AGENTQUEUE_PORT=0",
               *args, "--", sys.executable, "-m", "agentqueue", "mcp"]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        return done.returncode, json.loads(done.stdout.strip().splitlines()[-1])

    yield run
    daemon.stop(home, timeout=15)


@needs_inspector
@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_inspector_lists_and_calls_tools(inspect, era: str) -> None:
    code, listing = inspect("--strict", "--method", "tools/list", era=era)
    assert code == 0, listing  # --strict: every schema passes the Inspector's portability lint
    names = {tool["name"] for tool in listing["result"]["tools"]}
    assert {"create_project", "create_task", "get_status", "list_tasks"} <= names
    code, created = inspect("--method", "tools/call", "--tool-name", "create_project",
                            "--tool-args-json", json.dumps({"name": f"Inspected {era}"}), era=era)
    assert code == 0
    assert created["result"]["structuredContent"]["id"] == f"inspected-{era}"


@needs_inspector
def test_inspector_sees_tool_errors_resources_and_prompts(inspect) -> None:
    code, failed = inspect("--method", "tools/call", "--tool-name", "get_task", "--tool-args-json",
                           json.dumps({"task_id": "no-such-task"}), era="modern")
    assert code == 5  # the Inspector's exit code for a tool that returned isError
    assert "no-such-task" in json.dumps(failed)
    code, status = inspect("--method", "resources/read", "--uri", "agentqueue://status")
    assert code == 0
    assert json.loads(status["result"]["contents"][0]["text"])["orchestrator"]["state"] == "running"
    code, prompt = inspect("--method", "prompts/get", "--prompt-name", "dispatcher")
    assert code == 0
    assert "dispatcher" in prompt["result"]["messages"][0]["content"]["text"].lower()
