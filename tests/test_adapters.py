"""Adapters read real captured CLI streams (tests/data/streams, recorded from the real binaries)."""

from __future__ import annotations

import json

from pathlib import Path

import pytest

from agentqueue.engine.adapters import PARSERS
from agentqueue.engine.adapters.base import AgentConfig
from agentqueue.engine.adapters import claude_code, codex, command, gemini

STREAMS = Path(__file__).parent / "data" / "streams"


def parse(name: str, kind: str, exit_code: int):
    parser = PARSERS[kind]()
    events = [e for line in (STREAMS / name).read_text().splitlines() for e in parser.feed(line)]
    return events, parser.finish(exit_code)


@pytest.mark.parametrize(("name", "exit_code", "error_type"), [
    ("claude_stream_429.jsonl", 1, "rate_limit"),
    ("claude_stream_401.jsonl", 1, "auth"),
    ("claude_stream_not_logged_in.jsonl", 1, "auth"),
    ("claude_stream_400_prompt_too_long.jsonl", 1, "prompt_too_long"),
    ("claude_stream_error_max_turns.jsonl", 1, "max_turns"),
])
def test_claude_failures_are_classified(name: str, exit_code: int, error_type: str) -> None:
    _, result = parse(name, "claude-code", exit_code)
    assert result.status == "failed" and result.error_type == error_type and result.error_message


def test_claude_success_takes_tokens_from_model_usage_and_cost_from_result() -> None:
    events, result = parse("claude_stream_mcp_tool_allowed.jsonl", "claude-code", 0)
    assert result.status == "completed"
    assert result.tokens == {"input": 200, "output": 84, "cache_read": 50, "cache_write": 100, "total": 434}
    assert result.cost_usd == pytest.approx(0.00299)
    assert any(e.kind == "tool_call" and e.tool.endswith("__echo") for e in events)
    assert any(e.kind == "tool_result" for e in events)


def test_claude_two_turns_are_cumulative_not_summed_twice() -> None:
    _, result = parse("claude_stream_input_two_turns.jsonl", "claude-code", 0)
    assert result.tokens["input"] == 300 and result.cost_usd == pytest.approx(0.004485)


def test_claude_without_result_event_crashed() -> None:
    parser = PARSERS["claude-code"]()
    parser.feed('{"type":"system","subtype":"init"}')
    result = parser.finish(143)
    assert result.status == "failed" and result.error_type == "crashed" and "143" in result.error_message


def test_codex_tokens_subtract_cached_from_input() -> None:
    events, result = parse("codex_exec_json_tool.jsonl", "codex", 0)
    assert result.status == "completed"
    assert result.tokens == {"input": 150, "output": 84, "cache_read": 50, "cache_write": 0, "total": 284}
    assert [e.tool for e in events if e.kind == "tool_call"] == ["shell"]


def test_codex_401_is_auth() -> None:
    _, result = parse("codex_exec_json_401.jsonl", "codex", 1)
    assert result.status == "failed" and result.error_type == "auth"


def test_gemini_stream_and_error() -> None:
    events, result = parse("gemini_stream_json_tool.jsonl", "gemini", 0)
    assert result.status == "completed" and result.tokens["total"] == 447 and result.tokens["cache_read"] == 75
    assert [e.tool for e in events if e.kind == "tool_call"] == ["run_shell_command"]
    _, failed = parse("gemini_stream_json_api_error.jsonl", "gemini", 144)
    assert failed.status == "failed" and failed.error_type == "auth"


def test_command_exit_code_decides() -> None:
    parser = PARSERS["command"]()
    parser.feed("working\n")
    assert parser.finish(0).status == "completed"
    assert parser.finish(2).error_type == "crashed"


def test_builders_put_the_prompt_where_each_cli_wants_it() -> None:
    cfg = AgentConfig("claude-code", binary="/bin/claude", model="m", max_turns=7,
                      deny_rules=["Bash(rm:*)", "mcp__github__delete_repo"])
    spec = claude_code.build(cfg, "do it", "ctx", None)
    assert spec.interactive and json.loads(spec.stdin) == {"type": "user", "message": {"role": "user",
                                                                                         "content": "do it"}}
    assert "--strict-mcp-config" in spec.argv and "--verbose" in spec.argv
    assert spec.argv[spec.argv.index("--max-turns") + 1] == "7"
    assert spec.argv[spec.argv.index("--input-format") + 1] == "stream-json"
    assert spec.argv[spec.argv.index("--permission-prompt-tool") + 1] == "stdio"
    assert spec.argv[spec.argv.index("--permission-mode") + 1] == "default"
    assert "Bash" in json.loads(spec.argv[spec.argv.index("--settings") + 1])["permissions"]["ask"]
    # A deny on an asked tool is answered by us; on any other tool the CLI enforces it itself.
    assert spec.argv[spec.argv.index("--disallowedTools") + 1] == "mcp__github__delete_repo"
    spec = codex.build(AgentConfig("codex", binary="codex"), "do it", "", None)
    assert spec.stdin is None and spec.argv[-1] == "do it" and spec.argv[-2] == "--"
    assert "workspace-write" in spec.argv  # the standard preset
    assert "read-only" in codex.build(AgentConfig("codex", preset="readonly"), "x", "", None).argv
    assert "--dangerously-bypass-approvals-and-sandbox" in codex.build(AgentConfig("codex", preset="autonomous"),
                                                                         "x", "", None).argv
    spec = gemini.build(AgentConfig("gemini"), "-rf", "", None)
    assert spec.stdin is None and spec.argv[-1] == "--prompt=-rf"
    assert gemini.build(AgentConfig("gemini", preset="readonly"), "x", "", None).argv[4] == "plan"
    spec = command.build(AgentConfig("command", command="python3 -c 'print(1)'"), "p", "", None)
    assert spec.argv == ["python3", "-c", "print(1)"] and spec.stdin == b"p"
