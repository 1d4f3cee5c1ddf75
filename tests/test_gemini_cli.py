"""The real Gemini CLI (`gemini -o stream-json -p`) against a loopback mock of the Gemini API.

Only the model is scripted (tests/mock_gemini.py); the argv is the gemini adapter's own, and the captured
stdout goes through the adapter's parser, so these tests pin what AgentQueue assumes about gemini.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from agentqueue.engine.adapters.base import AgentConfig
from agentqueue.engine.adapters.gemini import GeminiParser, build, build_headless

from . import mock_gemini as mock
from .processes import run_cli_in_new_repo
from .third_party import npm_bin

GEMINI = npm_bin("gemini")
pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(GEMINI is None, reason="gemini CLI not installed (npm @google/gemini-cli)")]

RUN_TIMEOUT = 60  # wall clock per gemini run; each takes 2-4 s (node startup dominates)


def run_gemini(tmp_path: Path, base_url: str, prompt: str, preset: str = "standard",
               **home: Any) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]], float]:
    spec = build_headless(AgentConfig("gemini", binary=GEMINI, preset=preset), prompt, "", None)
    assert spec.stdin is None  # stdin is closed: -p would append anything piped in to the prompt
    env = {**os.environ, **mock.gemini_home(tmp_path, base_url, **home), **spec.env}
    return run_cli_in_new_repo(spec.argv, tmp_path / "repo", env, RUN_TIMEOUT)


def parse(stdout: str, exit_code: int):
    parser = GeminiParser()
    events = []
    for line in stdout.splitlines(keepends=True):
        events += parser.feed(line)
    return events, parser.finish(exit_code)


def stats_of(events: list[dict[str, Any]]) -> dict[str, Any]:
    results = [e for e in events if e["type"] == "result"]
    assert len(results) == 1, events
    return results[0]


@pytest.fixture
def api():
    with mock.MockGemini() as server:
        yield server


def test_the_engine_runs_gemini_through_acp():
    """Issue 24: every preset runs Gemini's ACP mode, so the policy decides each call (tests/test_acp_gemini.py)."""
    for preset in ("readonly", "standard", "autonomous"):
        spec = build(AgentConfig("gemini", binary="gemini", preset=preset, model="m"), "do it", "", None)
        assert spec.argv[:3] == ["gemini", "--acp", "--skip-trust"] and spec.interactive and spec.parser is not None
        assert spec.argv[-2:] == ["-m", "m"]
        assert ("plan" in spec.argv) == (preset == "readonly")


def test_argv_is_headless_stream_json_yolo():
    argv = build_headless(AgentConfig("gemini", binary="gemini"), "do it", "", None).argv
    assert argv[0] == "gemini" and argv[argv.index("-o") + 1] == "stream-json" and "--skip-trust" in argv
    assert argv[argv.index("--approval-mode") + 1] == "yolo"  # auto_edit offers no shell tool headless
    assert argv[-1] == "--prompt=do it"  # one argument, so a prompt starting with "-" is still the prompt


@pytest.mark.real_cli
def test_write_file_runs_the_shell_tool_and_reports_usage(tmp_path: Path, api: mock.MockGemini):
    proc, events, _ = run_gemini(tmp_path, api.base_url, "SCENARIO:write_file create the hello file")
    assert proc.returncode == 0, proc.stderr

    written = tmp_path / "repo" / mock.WRITE_FILE_NAME
    assert written.read_text() == mock.WRITE_FILE_CONTENT

    uses = [e for e in events if e["type"] == "tool_use"]
    assert [u["tool_name"] for u in uses] == [mock.SHELL_TOOL]
    assert uses[0]["parameters"]["command"] == mock.WRITE_FILE_COMMAND
    results = [e for e in events if e["type"] == "tool_result"]
    assert [(r["tool_id"], r["status"]) for r in results] == [(uses[0]["tool_id"], "success")]
    assert [e["content"] for e in events if e["type"] == "message" and e["role"] == "assistant"] == [mock.FINAL_TEXT]

    result = stats_of(events)
    assert result["status"] == "success"
    expected = mock.expected_stats("router", "tool_call", "final")  # the router's call counts too
    assert {k: result["stats"][k] for k in expected} == expected
    assert expected == {"input_tokens": 320, "cached": 80, "input": 240, "output_tokens": 47, "total_tokens": 378}
    assert result["stats"]["tool_calls"] == 1 and list(result["stats"]["models"]) == [mock.MODEL]

    # the mock saw: the router's classifier, the prompt, then the conversation plus the command's result
    assert api.steps_sent == ["router", "tool_call", "final"]
    chats = api.chat_requests
    assert len(chats) == 2 and mock.SHELL_TOOL in mock.tool_names(chats[0])
    assert [r["name"] for r in mock.function_responses(chats[1])] == [mock.SHELL_TOOL]
    assert all(path.endswith(":streamGenerateContent?alt=sse") for _, path in api.log[1:])

    parsed, run = parse(proc.stdout, proc.returncode)
    assert [(e.tool, e.args["command"]) for e in parsed if e.kind == "tool_call"] == [
        (mock.SHELL_TOOL, mock.WRITE_FILE_COMMAND)]
    assert run.status == "completed", run
    assert run.tokens == {"input": 240, "output": 47, "cache_read": 80, "cache_write": 0, "total": 378}
    assert run.summary == mock.FINAL_TEXT


@pytest.mark.real_cli
def test_plain_prompt_gets_a_text_answer_from_deltas(tmp_path: Path, api: mock.MockGemini):
    proc, events, _ = run_gemini(tmp_path, api.base_url, "say hello")
    assert proc.returncode == 0, proc.stderr
    deltas = [e for e in events if e["type"] == "message" and e["role"] == "assistant"]
    assert len(deltas) == 2 and all(d.get("delta") for d in deltas)  # one per SSE chunk
    assert "".join(d["content"] for d in deltas) == mock.DEFAULT_TEXT
    expected = mock.expected_stats("router", "text")
    assert {k: stats_of(events)["stats"][k] for k in expected} == expected
    assert api.steps_sent == ["router", "text"]
    _, run = parse(proc.stdout, proc.returncode)
    assert run.status == "completed" and run.summary == mock.DEFAULT_TEXT
    assert run.tokens["total"] == expected["total_tokens"] and run.tokens["input"] == expected["input"]


@pytest.mark.real_cli
def test_prompt_that_looks_like_a_flag_is_still_the_prompt(tmp_path: Path, api: mock.MockGemini):
    proc, events, _ = run_gemini(tmp_path, api.base_url, "-rf")
    assert proc.returncode == 0, proc.stderr
    assert [e["content"] for e in events if e["type"] == "message" and e["role"] == "user"] == ["-rf"]


@pytest.mark.parametrize("max_attempts", [1, 2], ids=["no-retry", "one-retry"])
@pytest.mark.real_cli
def test_rate_limit_fails_fast_as_rate_limit(tmp_path: Path, api: mock.MockGemini, max_attempts: int):
    proc, events, elapsed = run_gemini(tmp_path, api.base_url, "SCENARIO:rate_limit anything",
                                       max_attempts=max_attempts)
    assert proc.returncode != 0  # 173 with 0.61.0
    assert elapsed < 30  # one backoff step is 5 s +-30%; the default 10 attempts would take minutes

    result = stats_of(events)
    assert result["status"] == "error"
    message = result["error"]["message"]
    assert mock.RATE_LIMIT_MESSAGE in message
    assert "quota increase" in message  # the CLI's advice on every 429, which the parser must see past
    assert not any(e["type"] == "message" and e["role"] == "assistant" for e in events)
    assert len(api.chat_requests) == max_attempts and api.steps_sent == ["router"]

    _, run = parse(proc.stdout, proc.returncode)
    assert run.status == "failed"
    assert run.error_type == "rate_limit", run
    assert mock.RATE_LIMIT_MESSAGE in (run.error_message or "")
    assert run.tokens["total"] == mock.expected_stats("router")["total_tokens"]
    # Issue 22: the engine parks gemini agents at the CLI's first "Attempt 1 failed" line on stderr, not after
    # its retries (engine/parking.py).
    early = GeminiParser()
    for line in proc.stderr.splitlines():
        early.feed_stderr(line)
        if early.account_error:
            break
    assert early.account_error is not None and early.account_error.kind == "rate_limit"
    assert early.account_error.message.startswith("Attempt 1 failed"), early.account_error


@pytest.mark.real_cli
def test_the_readonly_preset_offers_gemini_no_shell(tmp_path: Path, api: mock.MockGemini):
    """Gemini asks no host about single calls: `readonly` runs it in plan mode, where it has no shell tool."""
    argv = build_headless(AgentConfig("gemini", binary="gemini", preset="readonly"), "x", "", None).argv
    assert argv[argv.index("--approval-mode") + 1] == "plan"
    proc, _, _ = run_gemini(tmp_path, api.base_url, "SCENARIO:write_file create the hello file", preset="readonly")
    assert not (tmp_path / "repo" / mock.WRITE_FILE_NAME).exists()
    assert api.chat_requests and mock.SHELL_TOOL not in mock.tool_names(api.chat_requests[0])
