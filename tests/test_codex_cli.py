"""The real Codex CLI (`codex app-server`, JSON-RPC over stdio) against a loopback mock of the Responses API.

Only the model is scripted (tests/mock_openai.py); the argv, the handshake and the answers are the codex adapter's
own (its parser writes them back), every question is answered "allow" here (the policy is tested in
tests/test_permissions_codex.py), and what Codex prints goes through the same parser: these tests pin what
AgentQueue assumes about Codex's protocol.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agentqueue.engine.adapters.base import AgentConfig, RunResult
from agentqueue.engine.adapters.codex import CodexParser, build

from . import mock_openai as mock
from .third_party import npm_bin

CODEX = npm_bin("codex")
pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(CODEX is None, reason="codex CLI not installed (npm @openai/codex)")]

RUN_TIMEOUT = 60  # wall clock per codex run; each takes about a second


@dataclass
class Conversation:
    messages: list[dict[str, Any]] = field(default_factory=list)  # everything Codex printed, parsed
    result: RunResult | None = None
    exit_code: int | None = None
    elapsed: float = 0.0
    parked_at: int = 0  # the line at which the parser first saw a failed login or a limit (0: never)
    questions: int = 0

    def notes(self, method: str) -> list[dict[str, Any]]:
        return [m.get("params") or {} for m in self.messages if m.get("method") == method and "id" not in m]


def converse(tmp_path: Path, base_url: str, prompt: str, **home: Any) -> Conversation:
    """One run as the engine has it, in a fresh `git init` repo: Codex's own sandbox off, as inside AgentQueue's
    (with bubblewrap installed, as AgentQueue needs, Codex 0.169's own sandbox silently runs no command as root)."""
    spec = build(AgentConfig("codex", binary=CODEX, sandboxed=True), prompt, "", None)
    workdir = tmp_path / "repo"
    workdir.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=workdir, check=True)
    env = {**os.environ, **mock.codex_home(tmp_path, base_url, **home), **spec.env}
    parser, out = spec.parser, Conversation()
    assert isinstance(parser, CodexParser)  # a parser made with the run: it holds the thread and the prompt
    started = time.monotonic()
    process = subprocess.Popen(spec.argv, cwd=workdir, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL)
    assert process.stdin is not None and process.stdout is not None

    def write(data: bytes) -> None:
        if data and not process.stdin.closed:  # type: ignore[union-attr]
            process.stdin.write(data)  # type: ignore[union-attr]
            process.stdin.flush()  # type: ignore[union-attr]

    write(spec.stdin or b"")
    try:
        for number, raw in enumerate(process.stdout, 1):
            out.messages.append(json.loads(raw))
            for event in parser.feed(raw.decode()):
                if event.kind == "send":
                    write(event.text.encode())
                elif event.kind == "control" and event.data:
                    out.questions += 1
                    write(parser.encode_answer(str(event.data["request_id"]), {"behavior": "allow"}))
                elif event.kind == "done":
                    process.stdin.close()
            if parser.account_error and not out.parked_at:
                out.parked_at = number
        out.exit_code = process.wait(timeout=RUN_TIMEOUT)
    finally:
        if process.poll() is None:
            process.kill()
    out.elapsed = time.monotonic() - started
    out.result = parser.finish(out.exit_code)
    return out


@pytest.fixture
def api():
    with mock.MockOpenAI() as server:
        yield server


@pytest.mark.real_cli
def test_write_file_runs_the_shell_tool_after_asking_and_reports_usage(tmp_path: Path, api: mock.MockOpenAI):
    run = converse(tmp_path, api.base_url, "SCENARIO:write_file create the hello file")
    assert run.exit_code == 0 and run.result is not None
    assert (tmp_path / "repo" / mock.WRITE_FILE_NAME).read_text() == mock.WRITE_FILE_CONTENT
    assert run.questions == 1  # under `untrusted`, even this command was asked about first

    commands = [p["item"] for p in run.notes("item/completed") if p["item"].get("type") == "commandExecution"]
    assert len(commands) == 1 and mock.WRITE_FILE_COMMAND in commands[0]["command"]
    assert commands[0]["exitCode"] == 0 and commands[0]["status"] == "completed"
    texts = [p["item"]["text"] for p in run.notes("item/completed") if p["item"].get("type") == "agentMessage"]
    assert texts == [mock.FINAL_TEXT]

    # One usage note per model response: `last` is that response's, `total` the thread's running sum.
    usage = [p["tokenUsage"] for p in run.notes("thread/tokenUsage/updated")]
    assert len(usage) == 2
    expected = mock.expected_turn_usage("tool_call", "final")
    total = usage[-1]["total"]
    assert (total["inputTokens"], total["cachedInputTokens"], total["outputTokens"],
            total["reasoningOutputTokens"]) == (270, 80, 42, 8) == tuple(expected.values())
    assert usage[0]["last"]["inputTokens"] == mock.USAGE["tool_call"]["input_tokens"]

    requests = api.requests
    assert api.steps_sent == ["tool_call", "final"] and len(requests) == 2
    assert all(r["model"] == mock.MODEL and r["stream"] is True for r in requests)
    outputs = [i for i in requests[1]["input"] if i.get("type") == "function_call_output"]
    assert [o["call_id"] for o in outputs] == [mock.WRITE_FILE_CALL_ID]

    result = run.result
    assert result.status == "completed", result
    assert result.tokens == {"input": 270 - 80, "output": 42, "cache_read": 80, "cache_write": 0, "total": 312}
    assert result.summary == mock.FINAL_TEXT


@pytest.mark.real_cli
def test_plain_prompt_gets_a_text_answer(tmp_path: Path, api: mock.MockOpenAI):
    run = converse(tmp_path, api.base_url, "say hello")
    assert run.exit_code == 0 and run.result is not None
    assert [p["item"]["text"] for p in run.notes("item/completed")
            if p["item"].get("type") == "agentMessage"] == [mock.DEFAULT_TEXT]
    assert api.steps_sent == ["text"] and run.questions == 0
    assert run.result.status == "completed" and run.result.summary == mock.DEFAULT_TEXT
    assert run.result.tokens["output"] == mock.USAGE["text"]["output_tokens"]


@pytest.mark.parametrize("max_retries", [0, None], ids=["no-retries", "codex-default-retries"])
@pytest.mark.real_cli
def test_rate_limit_fails_fast_as_rate_limit(tmp_path: Path, api: mock.MockOpenAI, max_retries: int | None):
    run = converse(tmp_path, api.base_url, "SCENARIO:rate_limit anything", max_retries=max_retries)
    assert run.elapsed < 20  # Retry-After: 0 keeps even codex's default retries quick
    turns = [p["turn"] for p in run.notes("turn/completed")]
    assert [t["status"] for t in turns] == ["failed"] and "429" in turns[0]["error"]["message"]

    errors = run.notes("error")
    retries = [e for e in errors if e["willRetry"]]
    if max_retries == 0:
        assert retries == [] and len(api.requests) == 1
    else:  # 0.169.0's default stream_max_retries is 5: "Reconnecting... 1/5" .. "5/5", 6 requests
        assert len(retries) >= 1 and len(api.requests) == len(retries) + 1

    # Issue 22: the engine parks codex agents at the first error line, before the CLI's own retries.
    first_error = next(n for n, m in enumerate(run.messages, 1) if m.get("method") == "error")
    assert run.parked_at == first_error, (run.parked_at, first_error)
    result = run.result
    assert result is not None and result.status == "failed"
    assert result.error_type == "rate_limit", result
    assert "429" in (result.error_message or "")
