"""The real Codex CLI (`codex exec --json`) against a loopback mock of the Responses API.

Only the model is scripted (tests/mock_openai.py); the argv is the codex adapter's own, and the captured
stdout goes through the adapter's parser, so these tests pin what AgentQueue assumes about codex.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from agentqueue.engine.adapters.base import AgentConfig
from agentqueue.engine.adapters.codex import CodexParser, build

from . import mock_openai as mock
from .processes import run_cli_in_new_repo
from .third_party import npm_bin

CODEX = npm_bin("codex")
pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(CODEX is None, reason="codex CLI not installed (npm @openai/codex)")]

RUN_TIMEOUT = 60  # wall clock per codex run; each takes about a second


def run_codex(tmp_path: Path, base_url: str, prompt: str, **home: Any) -> tuple[subprocess.CompletedProcess[str],
                                                                                   list[dict[str, Any]], float]:
    # As the engine runs it inside AgentQueue's sandbox: Codex's own sandbox off (with bubblewrap installed, as
    # AgentQueue needs, Codex 0.169's own sandbox silently runs no shell command as root).
    spec = build(AgentConfig("codex", binary=CODEX, sandboxed=True), prompt, "", None)
    assert spec.stdin is None  # a pipe on stdin would be appended to the prompt
    env = {**os.environ, **mock.codex_home(tmp_path, base_url, **home), **spec.env}
    return run_cli_in_new_repo(spec.argv, tmp_path / "repo", env, RUN_TIMEOUT)


def parse(stdout: str, exit_code: int):
    parser = CodexParser()
    for line in stdout.splitlines(keepends=True):
        parser.feed(line)
    return parser.finish(exit_code)


@pytest.fixture
def api():
    with mock.MockOpenAI() as server:
        yield server


def test_argv_is_headless_json_workspace_write():
    argv = build(AgentConfig("codex", binary="codex"), "do it", "", None).argv
    assert argv[:2] == ["codex", "exec"] and "--json" in argv and "--skip-git-repo-check" in argv
    assert argv[argv.index("-s") + 1] == "workspace-write"
    assert argv[-2:] == ["--", "do it"]
    inside = build(AgentConfig("codex", binary="codex", preset="readonly", sandboxed=True), "do it", "", None).argv
    assert "--dangerously-bypass-approvals-and-sandbox" in inside and "-s" not in inside  # our walls, not its own


@pytest.mark.real_cli
def test_write_file_runs_the_shell_tool_and_reports_usage(tmp_path: Path, api: mock.MockOpenAI):
    proc, events, _ = run_codex(tmp_path, api.base_url, "SCENARIO:write_file create the hello file")
    assert proc.returncode == 0, proc.stderr

    written = tmp_path / "repo" / mock.WRITE_FILE_NAME
    assert written.read_text() == mock.WRITE_FILE_CONTENT

    commands = [e["item"] for e in events
                if e["type"] == "item.completed" and e["item"].get("type") == "command_execution"]
    assert len(commands) == 1
    assert mock.WRITE_FILE_COMMAND in commands[0]["command"]
    assert commands[0]["exit_code"] == 0 and commands[0]["status"] == "completed"
    messages = [e["item"]["text"] for e in events
                if e["type"] == "item.completed" and e["item"].get("type") == "agent_message"]
    assert messages == [mock.FINAL_TEXT]

    completed = [e for e in events if e["type"] == "turn.completed"]
    assert len(completed) == 1
    usage = completed[0]["usage"]
    expected = mock.expected_turn_usage("tool_call", "final")  # codex sums the turn's two API calls
    assert {k: usage[k] for k in expected} == expected
    assert expected == {"input_tokens": 270, "cached_input_tokens": 80, "output_tokens": 42,
                        "reasoning_output_tokens": 8}

    # the mock saw: the prompt, then the same conversation plus the command's output
    requests = api.requests
    assert api.steps_sent == ["tool_call", "final"] and len(requests) == 2
    assert all(r["model"] == mock.MODEL and r["stream"] is True for r in requests)
    outputs = [i for i in requests[1]["input"] if i.get("type") == "function_call_output"]
    assert [o["call_id"] for o in outputs] == [mock.WRITE_FILE_CALL_ID]

    result = parse(proc.stdout, proc.returncode)
    assert result.status == "completed", result
    assert result.tokens["input"] == 270 - 80
    assert result.tokens["cache_read"] == 80
    assert result.tokens["output"] == 42
    assert result.summary == mock.FINAL_TEXT


@pytest.mark.real_cli
def test_plain_prompt_gets_a_text_answer(tmp_path: Path, api: mock.MockOpenAI):
    proc, events, _ = run_codex(tmp_path, api.base_url, "say hello")
    assert proc.returncode == 0, proc.stderr
    assert [e["item"]["text"] for e in events if e["type"] == "item.completed"
            and e["item"].get("type") == "agent_message"] == [mock.DEFAULT_TEXT]
    usage = next(e["usage"] for e in events if e["type"] == "turn.completed")
    expected = mock.expected_turn_usage("text")
    assert {k: usage[k] for k in expected} == expected
    assert api.steps_sent == ["text"]
    result = parse(proc.stdout, proc.returncode)
    assert result.status == "completed" and result.summary == mock.DEFAULT_TEXT


@pytest.mark.parametrize("max_retries", [0, None], ids=["no-retries", "codex-default-retries"])
@pytest.mark.real_cli
def test_rate_limit_fails_fast_as_rate_limit(tmp_path: Path, api: mock.MockOpenAI, max_retries: int | None):
    proc, events, elapsed = run_codex(tmp_path, api.base_url, "SCENARIO:rate_limit anything",
                                      max_retries=max_retries)
    assert proc.returncode != 0
    assert elapsed < 20  # Retry-After: 0 keeps even codex's default retries quick

    failed = [e for e in events if e["type"] == "turn.failed"]
    assert len(failed) == 1
    message = failed[0]["error"]["message"]
    assert "429" in message  # codex drops the body: "exceeded retry limit, last status: 429 Too Many Requests"
    assert not any(e["type"] == "turn.completed" for e in events)

    retries = [e for e in events if e["type"] == "error" and e["message"].startswith("Reconnecting...")]
    if max_retries == 0:
        assert retries == [] and len(api.requests) == 1
    else:  # 0.169.0's default stream_max_retries is 5: "Reconnecting... 1/5" .. "5/5", 6 requests
        assert len(retries) >= 1 and len(api.requests) == len(retries) + 1

    # Issue 22: the engine parks codex agents at the first error event, before the CLI's own retries.
    early = CodexParser()
    seen = 0
    for line in (line for line in proc.stdout.splitlines() if line.strip()):
        early.feed(line)
        seen += 1
        if early.account_error:
            break
    assert early.account_error is not None and early.account_error.kind == "rate_limit"
    first_error = next(n for n, e in enumerate(events, 1) if e["type"] in ("error", "turn.failed"))
    assert seen == first_error, (seen, first_error)
    result = parse(proc.stdout, proc.returncode)
    assert result.status == "failed"
    assert result.error_type == "rate_limit", result
    assert "429" in (result.error_message or "")
