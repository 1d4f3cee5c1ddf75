"""Adapters read real captured CLI streams (tests/data/streams, recorded from the real binaries)."""

from __future__ import annotations

import json

from pathlib import Path

import pytest

from agentqueue.engine.adapters import PARSERS
from agentqueue.engine.adapters.base import AgentConfig
from agentqueue.engine.adapters import claude_code, codex, command, gemini

from .slowdown import scaled

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
    """`codex app-server` against the mock (write_file: a command, then "Done."), recorded as the engine reads it."""
    events, result = parse("codex_app_server_tool.jsonl", "codex", 0)
    assert result.status == "completed" and result.summary == "Done."
    assert result.tokens == {"input": 190, "output": 42, "cache_read": 80, "cache_write": 0, "total": 312}
    assert result.cost_usd is None  # gpt-mock has no price: unknown, never guessed
    assert [(e.tool, e.args) for e in events if e.kind == "tool_call"] == [
        ("shell", {"command": "echo hello > codex_hello.txt"})]  # the script, unwrapped from `/bin/bash -lc`
    assert sum(e.kind == "usage" for e in events) == 2  # one per model response


def test_codex_401_is_auth() -> None:
    _, result = parse("codex_app_server_401.jsonl", "codex", 0)
    assert result.status == "failed" and result.error_type == "auth" and "401" in (result.error_message or "")


def test_codex_handshake_answers_and_questions() -> None:
    """What the parser writes back: `initialized` and `thread/start` after `initialize`, the MCP listing after the
    thread, `turn/start` after it; a question becomes one `can_use_tool` per part, answered once all are in."""
    spec = codex.build(AgentConfig("codex", binary="codex", sandboxed=True), "do it", "ctx", None)
    parser = spec.parser
    sent = [json.loads(e.text) for e in parser.feed('{"id":1,"result":{}}') if e.kind == "send"]
    assert [m.get("method") for m in sent] == ["initialized", "thread/start"]
    assert sent[1]["params"] == {"approvalPolicy": "untrusted", "approvalsReviewer": "user",
                                 "sandbox": "danger-full-access", "developerInstructions": "ctx"}
    listing = [json.loads(e.text) for e in parser.feed(json.dumps(
        {"id": 2, "result": {"thread": {"id": "t1"}, "model": "gpt-6.1-sol"}})) if e.kind == "send"]
    assert listing[0]["method"] == "mcpServerStatus/list"
    turn = [json.loads(e.text) for e in parser.feed(json.dumps({"id": 3, "result": {"data": []}})) if e.kind == "send"]
    assert turn[0]["method"] == "turn/start" and turn[0]["params"]["input"][0]["text"] == "do it"
    parser.feed(json.dumps({"method": "turn/started", "params": {"turn": {"id": "u1"}}}))
    parser.feed(json.dumps({"method": "item/started", "params": {"item": {"id": "c1", "type": "fileChange", "changes": [
        {"path": "/w/a.txt", "kind": {"type": "add"}}, {"path": "/w/b.txt", "kind": {"type": "update"}}]}}}))
    asked = parser.feed(json.dumps({"id": 0, "method": "item/fileChange/requestApproval", "params": {"itemId": "c1"}}))
    assert [(e.data["request"]["tool_name"], e.data["request"]["input"]) for e in asked if e.data] == [
        ("Write", {"file_path": "/w/a.txt"}), ("Edit", {"file_path": "/w/b.txt"})]
    assert parser.encode_answer("0#0", {"behavior": "allow"}) == b""  # one part still undecided
    lines = [json.loads(x) for x in parser.encode_answer("0#1", {"behavior": "deny", "message": "No."}).splitlines()]
    assert lines[0]["method"] == "turn/steer" and lines[0]["params"]["input"][0]["text"] == "AgentQueue: No."
    assert lines[1] == {"jsonrpc": "2.0", "id": 0, "result": {"decision": "decline"}}
    assert json.loads(parser.encode_message("Stop looping."))["params"]["expectedTurnId"] == "u1"
    refused = parser.feed(json.dumps({"id": 5, "method": "item/tool/requestUserInput", "params": {}}))
    assert json.loads(next(e.text for e in refused if e.kind == "send"))["error"]["code"] == -32601


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
    assert spec.argv == ["codex", "app-server"] and spec.interactive  # the prompt goes in with `turn/start`
    assert json.loads(spec.stdin or b"")["method"] == "initialize" and spec.parser.prompt == "do it"
    assert spec.parser.thread["sandbox"] == "workspace-write"  # the standard preset, outside our sandbox
    assert codex.build(AgentConfig("codex", preset="readonly"), "x", "", None).parser.thread["sandbox"] == "read-only"
    inside = codex.build(AgentConfig("codex", preset="readonly", sandboxed=True), "x", "", None).parser.thread
    assert inside["sandbox"] == "danger-full-access" and inside["approvalPolicy"] == "untrusted"  # our walls
    # Issue 24: gemini runs through ACP; the prompt goes in the session's first session/prompt, not in argv.
    spec = gemini.build(AgentConfig("gemini"), "-rf", "", None)
    assert spec.interactive and spec.parser.prompt == "-rf" and "-rf" not in spec.argv
    assert gemini.build(AgentConfig("gemini", preset="readonly"), "x", "", None).argv[-2:] == ["--approval-mode",
                                                                                              "plan"]
    spec = command.build(AgentConfig("command", command="python3 -c 'print(1)'"), "p", "", None)
    assert spec.argv == ["python3", "-c", "print(1)"] and spec.stdin == b"p"


# -- every run is paid for (issue 22): a run with no result event, from the usage its stream showed ----------------
def without_result(name: str) -> list[str]:
    """A captured stream as it stood before its result event: what a run killed at that moment had printed."""
    return [line for line in (STREAMS / name).read_text().splitlines() if '"type":"result"' not in line]


def test_a_killed_claude_run_counts_each_message_once_with_its_final_output() -> None:
    """Recorded from the real CLI (--include-partial-messages) on the mock, killed while its third request hung: two
    responses, each shown by a message_start, an assistant event (output 1, the start's copy) and a message_delta
    (output 42, the final count)."""
    parser = PARSERS["claude-code"]()
    events = [e for line in without_result("claude_stream_killed_partial_messages.jsonl") for e in parser.feed(line)]
    result = parser.finish(143)
    assert result.status == "failed" and result.error_type == "crashed" and result.partial
    assert result.tokens == {"input": 200, "output": 84, "cache_read": 50, "cache_write": 100, "total": 434}
    # claude-opus-5-5 at $4 / $20 / $0.20 cache read / $5 cache write per MTok: what the CLI itself charges (0.00299
    # for the same tokens in claude_stream_mcp_tool_allowed.jsonl's result).
    assert result.cost_usd == pytest.approx(0.00299)
    assert [e.tool for e in events if e.kind == "tool_call"] == ["Bash", "Bash"]  # the deltas are no events


@pytest.mark.parametrize(("name", "messages"), [
    ("claude_stream_error_max_turns.jsonl", 1),  # one response in two assistant events (text, tool_use)
    ("claude_stream_mcp_tool_allowed.jsonl", 2),  # msg_mock_1 twice, then msg_mock_3
])
def test_assistant_events_that_share_a_message_id_are_one_response(name: str, messages: int) -> None:
    parser = PARSERS["claude-code"]()
    lines = without_result(name)
    assistant = [json.loads(line) for line in lines if '"type":"assistant"' in line]
    assert len(assistant) > messages  # the same message id comes more than once
    for line in lines:
        parser.feed(line)
    result = parser.finish(1)
    # Without partial messages only the start's usage is there (output 1 a response): counted once per id.
    assert result.partial and result.tokens == {"input": 100 * messages, "output": messages,
                                                "cache_read": 25 * messages, "cache_write": 50 * messages,
                                                "total": 176 * messages}


def test_a_result_is_the_figure_when_it_came() -> None:
    """The usage seen on the way never replaces or adds to a result's: the result counts the whole run."""
    _, result = parse("claude_stream_mcp_tool_allowed.jsonl", "claude-code", 0)
    assert not result.partial and result.tokens["output"] == 84 and result.cost_usd == pytest.approx(0.00299)


def test_an_aborted_turn_whose_result_counts_nothing_keeps_what_the_stream_showed() -> None:
    """An interrupted turn's result reports zero usage (claude_stream_interrupt.jsonl); the responses the stream had
    shown were used all the same."""
    parser = PARSERS["claude-code"]()
    for line in without_result("claude_stream_killed_partial_messages.jsonl"):
        parser.feed(line)
    for line in (STREAMS / "claude_stream_interrupt.jsonl").read_text().splitlines():
        parser.feed(line)
    result = parser.finish(1)
    assert parser.result is not None and parser.result["modelUsage"] == {}
    assert result.partial and result.tokens["total"] == 434 and result.cost_usd == pytest.approx(0.00299)


def test_a_model_of_unknown_price_records_its_tokens_and_no_cost() -> None:
    parser = PARSERS["claude-code"]()
    for line in without_result("claude_stream_killed_partial_messages.jsonl"):
        parser.feed(line.replace("claude-opus-5-5", "claude-unreleased-9"))
    result = parser.finish(143)
    assert result.partial and result.tokens["total"] == 434 and result.cost_usd is None


def test_a_run_that_used_nothing_costs_nothing() -> None:
    parser = PARSERS["claude-code"]()
    for line in without_result("claude_stream_not_logged_in.jsonl"):  # the CLI's own <synthetic> message
        parser.feed(line)
    result = parser.finish(1)
    assert result.partial and result.tokens["total"] == 0 and result.cost_usd == 0


def test_prices_know_snapshots_and_long_prompts_and_nothing_else() -> None:
    from agentqueue.engine.adapters.prices import GEMINI_PRICES as GEMINI
    from agentqueue.engine.adapters.prices import message_cost, openai_cost, price_of, tokens_cost

    assert price_of("claude-haiku-4-5-20251001") is price_of("claude-haiku-4-5") is not None
    assert price_of("claude-opus-5-5[1m]") is price_of("claude-opus-5-5")
    assert price_of("claude-opus-4-9") is None and price_of("gpt-5") is None and price_of(None) is None
    # OpenAI's, for Codex: codex-cli 0.169's default model, its dated snapshot, its long-context rate.
    assert openai_cost("gpt-6.1-sol-2026-09-29", {"input": 1000, "cache_read": 1000, "output": 1000}) == \
        pytest.approx((1000 * 2 + 1000 * 0.10 + 1000 * 10) / 1e6)
    assert openai_cost("gpt-6.1-sol", {"input": 300_000}) == pytest.approx(300_000 * 4 / 1e6)
    assert openai_cost("gpt-mock", {"input": 1}) is None and openai_cost("claude-opus-5-5", {"input": 1}) is None
    # Google's, for Gemini: the routed model, a preview suffix, the Pro models' >200K-token prompt tier, nothing else.
    assert tokens_cost("gemini-3.8-flash", {"input": 1000, "output": 100}) == \
        pytest.approx((1000 * 0.75 + 100 * 3.75) / 1e6)
    assert price_of("gemini-3-flash-preview", GEMINI) is price_of("gemini-3-flash", GEMINI) is not None
    assert price_of("gemini-3.1-pro-preview-customtools", GEMINI) is price_of("gemini-3.1-pro-preview", GEMINI)
    assert tokens_cost("gemini-2.5-pro", {"input": 100_000, "cache_read": 100_000, "output": 1000}) == \
        pytest.approx((100_000 * 1.25 + 100_000 * 0.125 + 1000 * 10) / 1e6)
    assert tokens_cost("gemini-2.5-pro", {"input": 300_000, "output": 1000}) == \
        pytest.approx((300_000 * 2.5 + 1000 * 15) / 1e6)
    assert tokens_cost("gemini-2.5-pro", {"input": 300_000}, one_request=False) == pytest.approx(300_000 * 1.25 / 1e6)
    assert tokens_cost("gemini-2.5-flash", {"input": 300_000}) == pytest.approx(300_000 * 0.30 / 1e6)  # flat
    for unknown in ("auto", "gemini-3.5-flash-lite", "gemini-2.5-flash-preview-tts-x", "gemma-4-31b-it", None):
        assert tokens_cost(unknown, {"input": 1}) is None, unknown
    assert tokens_cost("claude-haiku-4-5", {"input": 1000}) == message_cost("claude-haiku-4-5", {"input_tokens": 1000})
    usage = {"input_tokens": 1_000_000, "output_tokens": 0}
    assert message_cost("claude-sonnet-4-5", usage) == pytest.approx(6.0)  # over 200K: the long-context rate
    assert message_cost("claude-sonnet-4-5", {"input_tokens": 1000}) == pytest.approx(0.003)
    hour = {"cache_creation_input_tokens": 1000, "cache_creation": {"ephemeral_1h_input_tokens": 400}}
    assert message_cost("claude-opus-5-5", hour) == pytest.approx((600 * 5 + 400 * 8) / 1e6)


def test_a_codex_run_killed_mid_turn_keeps_its_finished_responses_and_is_partial() -> None:
    parser = PARSERS["codex"]()
    lines = (STREAMS / "codex_app_server_tool.jsonl").read_text().splitlines()
    first_usage = next(n for n, line in enumerate(lines) if "thread/tokenUsage/updated" in line)
    for line in lines[:first_usage + 1]:  # killed after the first response (the command), before the second
        parser.feed(line)
    result = parser.finish(-15)
    assert result.status == "failed" and result.partial and result.tokens["total"] == 150  # the mock's tool_call step
    _, whole = parse("codex_app_server_tool.jsonl", "codex", 0)
    assert not whole.partial


def test_a_gemini_run_without_its_result_is_partial() -> None:
    parser = PARSERS["gemini"]()
    for line in without_result("gemini_stream_json_tool.jsonl"):
        parser.feed(line)
    result = parser.finish(-15)
    assert result.partial and result.tokens["total"] == 0  # Gemini reports usage only in its result


@pytest.mark.anyio
async def test_a_claude_process_that_dies_without_its_result_keeps_what_it_used(tmp_path: Path) -> None:
    """Not killed: a process that prints a run's stream up to its third request, then exits with an error and no
    result event. The runner's result holds the two responses' usage, partial; nothing was cut short by us."""
    import sys

    from agentqueue.engine.runner import RunHandle, run_agent
    from agentqueue.engine.watchdog import WatchdogLimits
    from agentqueue.engine.adapters.base import RunSpec

    stream = tmp_path / "stream.jsonl"
    stream.write_text("\n".join(without_result("claude_stream_killed_partial_messages.jsonl")) + "\n")
    script = f"import sys; sys.stdout.write(open({str(stream)!r}).read()); sys.stdout.flush(); sys.exit(1)"
    spec = RunSpec(argv=[sys.executable, "-c", script], stdin=None)
    handle = RunHandle()
    result = await run_agent(spec, tmp_path, PARSERS["claude-code"](), handle, tmp_path / "task.log",
                             WatchdogLimits(stall_seconds=scaled(30), timeout_seconds=scaled(60)))
    assert handle.stop_reason is None and result.error_type == "crashed" and "(1)" in result.error_message
    assert result.partial and result.tokens["total"] == 434 and result.cost_usd == pytest.approx(0.00299)
