"""The ACP session as a parser of what an agent prints (engine/adapters/acp.py), including output no honest agent
sends: every line is read, nothing crashes the run, and the usage, cost and failure kinds come out right."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from agentqueue.engine.adapters.acp import AcpSession, build, mcp_servers
from agentqueue.engine.adapters.acp_presets import argv_of, preset_of
from agentqueue.engine.adapters.base import AgentConfig


def line(**message: Any) -> str:
    return json.dumps({"jsonrpc": "2.0", **message}) + "\n"


async def drive(session: AcpSession, answers: list[dict[str, Any]], updates: list[str] = ()) -> list[Any]:
    """Drive a session whose agent answers each request in order with `answers` (its `result` or `error`), the
    `updates` fed before the prompt's answer; the events the parser produced."""
    sent: list[dict[str, Any]] = []
    events: list[Any] = []

    async def send(data: bytes) -> bool:
        message = json.loads(data)
        sent.append(message)
        if "id" in message and answers:
            answer = answers.pop(0)
            if message["method"] == "session/prompt":
                for update in updates:
                    events.extend(session.feed(update))
            events.extend(session.feed(line(id=message["id"], **answer)))
        return True

    async def close() -> None:
        return None

    with anyio.fail_after(60):  # a hang guard, not a timing
        await session.drive(send, close, anyio.Path("/tree"))  # type: ignore[arg-type]
    return events


SETUP = [{"result": {"protocolVersion": 1}}, {"result": {"sessionId": "s1"}}]


@pytest.mark.anyio
async def test_usage_from_acp_and_a_price_for_a_known_model() -> None:
    session = AcpSession("do it", [])
    usage = {"inputTokens": 1000, "outputTokens": 100, "totalTokens": 1100}
    events = await drive(session, [*SETUP, {"result": {"stopReason": "end_turn", "usage": usage}}],
                         [line(method="session/update", params={"sessionId": "s1", "update": {
                             "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "all "}}}),
                          line(method="session/update", params={"sessionId": "s1", "update": {
                              "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "done"}}})])
    result = session.finish(0)
    assert result.status == "completed" and result.summary == "all done"
    assert [e.text for e in events if e.kind == "text"] == ["all done"]  # the message logged once, whole
    assert result.tokens == {"input": 1000, "output": 100, "cache_read": 0, "cache_write": 0, "total": 1100}
    assert result.cost_usd is None  # ACP's usage names no model: unknown, not guessed


@pytest.mark.anyio
async def test_gemini_quota_meta_per_model_is_priced_when_the_model_is_known() -> None:
    session = AcpSession("x", [])
    quota = {"token_count": {"input_tokens": 3000, "output_tokens": 300},
             "model_usage": [{"model": "claude-haiku-4-5", "token_count": {"input_tokens": 1000, "output_tokens": 100}},
                             {"model": "claude-haiku-4-5", "token_count": {"input_tokens": 2000,
                                                                           "output_tokens": 200}}]}
    await drive(session, [*SETUP, {"result": {"stopReason": "end_turn", "_meta": {"quota": quota}}}])
    result = session.finish(0)
    assert result.tokens["input"] == 3000 and result.tokens["output"] == 300
    assert result.cost_usd == pytest.approx((3000 * 1 + 300 * 5) / 1_000_000)  # haiku 4.5: $1 in, $5 out


@pytest.mark.parametrize(("answer", "kind"), [
    ({"error": {"code": 429, "message": "Rate limit exceeded. Try again later."}}, "rate_limit"),
    ({"error": {"code": -32000, "message": "Authentication required"}}, "auth"),
    ({"result": {"stopReason": "max_turn_requests"}}, "max_turns"),
    ({"result": {"stopReason": "max_tokens"}}, "prompt_too_long"),
])
@pytest.mark.anyio
async def test_failures_are_classified(answer: dict[str, Any], kind: str) -> None:
    session = AcpSession("x", [])
    await drive(session, [*SETUP, answer])
    result = session.finish(0)
    assert result.status == "failed" and result.error_type == kind, result


@pytest.mark.anyio
async def test_nonsense_usage_counts_nothing_and_never_crashes() -> None:
    session = AcpSession("x", [])
    bad = {"inputTokens": "lots", "outputTokens": -5, "totalTokens": True}
    await drive(session, [*SETUP, {"result": {"stopReason": "end_turn", "usage": bad}}])
    assert session.finish(0).tokens["total"] == 0
    session = AcpSession("x", [])
    quota = {"token_count": {}, "model_usage": [{"model": 5, "token_count": 7}, "junk"]}
    await drive(session, [*SETUP, {"result": {"stopReason": "end_turn", "_meta": {"quota": quota}}}])
    assert session.finish(0).status == "completed"


@pytest.mark.anyio
async def test_a_refused_session_fails_the_run_without_a_prompt() -> None:
    session = AcpSession("x", [])
    await drive(session, [{"result": {"protocolVersion": 1}}, {"error": {"code": -32602, "message": "bad cwd"}}])
    result = session.finish(0)
    assert result.status == "failed" and "session/new failed: bad cwd" in (result.error_message or "")


def test_hostile_lines_never_crash_the_parser() -> None:
    session = AcpSession("x", [])
    for text in ["not json", "{", "[1,2]", '{"jsonrpc":"2.0","id":99,"result":{}}', '{"jsonrpc":"1.0"}',
                 line(method="session/update", params="nope"), line(method="session/update", params={"update": 5}),
                 line(method="session/update", params={"update": {"sessionUpdate": "tool_call", "kind": None}}),
                 line(method="session/update", params={"update": {"sessionUpdate": "usage_update",
                                                                  "cost": {"amount": "lots", "currency": "USD"}}}),
                 line(id=7, method="fs/read_text_file", params=None), "x" * 100_000]:
        session.feed(text)
    assert session.reported_cost is None
    result = session.finish(1)
    assert result.status == "failed" and result.error_type == "crashed" and result.partial


def test_requests_from_the_agent_become_questions_and_tool_calls_are_counted_once() -> None:
    session = AcpSession("x", [])
    call = {"toolCallId": "c1", "title": "npm test", "kind": "execute"}
    first = session.feed(line(method="session/update", params={"update": {"sessionUpdate": "tool_call", **call}}))
    asked = session.feed(line(id="r-1", method="session/request_permission", params={"toolCall": call}))
    assert [e.kind for e in first] == ["tool_call"]
    assert [e.kind for e in asked] == ["control"] and asked[0].data["request_id"] == '"r-1"'  # the id kept as sent


def test_presets_and_mcp_servers() -> None:
    assert preset_of("gemini") is not None and preset_of("gemini --acp") is None
    assert argv_of("gemini", "readonly", "/bin/gemini") == ["/bin/gemini", "--acp", "--skip-trust",
                                                            "--approval-mode", "plan"]
    assert argv_of("my-agent --stdio 'a b'") == ["my-agent", "--stdio", "a b"]  # as written, no shell
    servers = mcp_servers({"mcpServers": {"agentqueue": {"command": "/x/aq", "args": ["mcp"], "env": {"A": "1"}}}})
    assert servers == [{"name": "agentqueue", "command": "/x/aq", "args": ["mcp"],
                        "env": [{"name": "A", "value": "1"}]}]
    spec = build(AgentConfig("acp", command="my-agent --stdio", model="m"), "p", "ctx", None)
    assert spec.argv == ["my-agent", "--stdio"] and spec.interactive and spec.parser.prompt == "ctx\n\np"
    assert spec.parser.client_reads  # any agent reads through AgentQueue (the jail, Read(path))...
    assert not build(AgentConfig("acp", command="gemini"), "p", "", None).parser.client_reads  # ...but gemini
