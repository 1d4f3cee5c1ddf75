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

from .slowdown import scaled


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

    with anyio.fail_after(scaled(60)):  # a hang guard, not a timing
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


def gemini_session(model: str | None = None) -> AcpSession:
    return build(AgentConfig("acp", command="gemini", model=model), "x", "", None).parser


def meta(*usage: tuple[str, int, int]) -> dict[str, Any]:
    """A prompt's answer as gemini-cli 0.61.0 sends it: `_meta.quota` with (model, input, output) per model."""
    models = [{"model": m, "token_count": {"input_tokens": i, "output_tokens": o}} for m, i, o in usage]
    total = {"input_tokens": sum(i for _, i, _ in usage), "output_tokens": sum(o for _, _, o in usage)}
    return {"result": {"stopReason": "end_turn", "_meta": {"quota": {"token_count": total, "model_usage": models}}}}


@pytest.mark.anyio
async def test_gemini_tokens_under_auto_are_the_routed_models() -> None:
    """gemini-cli 0.61.0 names the model its router chose on a turn's first call only, the others `auto` (what the
    real CLI sent against tests/mock_gemini.py): all of them are that model's, priced at Google's rates."""
    session = gemini_session()
    await drive(session, [*SETUP, meta(("gemini-3.8-flash", 120, 30), ("auto", 150, 12))])
    result = session.finish(0)
    assert set(session.model_usage) == {"gemini-3.8-flash"} and result.tokens["input"] == 270
    assert result.cost_usd == pytest.approx(round((270 * 0.75 + 42 * 3.75) / 1_000_000, 6), abs=1e-12)


@pytest.mark.parametrize(("model", "usage", "cost"), [
    ("gemini-2.5-pro", [("gemini-2.5-pro", 1000, 100)], (1000 * 1.25 + 100 * 10) / 1_000_000),  # as configured
    ("gemini-2.5-pro", [("auto", 1000, 100)], (1000 * 1.25 + 100 * 10) / 1_000_000),  # unnamed: the configured one
    (None, [("auto", 1000, 100)], None),  # nobody says which model: unknown, not guessed
    (None, [("gemini-3.8-flash", 10, 1), ("gemini-2.5-pro", 10, 1), ("auto", 10, 1)], None),  # which one? unknown
    (None, [("gemini-3.5-flash-lite", 1000, 100)], None),  # a model with no price found
    # A turn's sum of many calls says nothing of one prompt's size: the base rates, not the >200K tier.
    ("gemini-2.5-pro", [("gemini-2.5-pro", 300_000, 100)], (300_000 * 1.25 + 100 * 10) / 1_000_000),
])
@pytest.mark.anyio
async def test_gemini_usage_is_priced_by_the_model_that_ran(model: str | None, usage: list[tuple[str, int, int]],
                                                           cost: float | None) -> None:
    session = gemini_session(model)
    await drive(session, [*SETUP, meta(*usage)])
    result = session.finish(0)
    assert result.cost_usd == (None if cost is None else pytest.approx(round(cost, 6), abs=1e-12))


@pytest.mark.anyio
async def test_a_refusals_reason_is_the_next_prompt_once() -> None:
    """ACP's reject has no message: the reason the channel put in the answer's `_meta` is sent as the next prompt
    of the same session after the turn ends, each reason once per run (a refused retry is not told again)."""
    session = AcpSession("do it", [])
    prompts: list[str] = []
    written: list[bytes] = []

    def refuse(reason: str) -> None:
        answer = {"outcome": {"outcome": "selected", "optionId": "reject"},
                  "_meta": {"agentqueue": {"refusal": reason}}}
        written.append(session.encode_answer("7", {"result": answer}))

    async def send(data: bytes) -> bool:
        message = json.loads(data)
        if message.get("method") == "session/prompt":
            prompts.append(message["params"]["prompt"][0]["text"])
            refuse("Bash(rm x) is denied.")  # asked again in every turn: told once
            if len(prompts) == 1:
                refuse("Bash(rm x) is denied.")
                refuse("Edit(/etc/passwd) is denied.")
            session.feed(line(id=message["id"], result={"stopReason": "end_turn"}))
        elif "id" in message:
            session.feed(line(id=message["id"], result={"protocolVersion": 1, "sessionId": "s1"}))
        return True

    async def close() -> None:
        return None

    with anyio.fail_after(scaled(60)):  # a hang guard, not a timing
        await session.drive(send, close, anyio.Path("/tree"))  # type: ignore[arg-type]
    assert prompts == ["do it", "AgentQueue refused tool calls of your last turn:\n- Bash(rm x) is denied.\n"
                                "- Edit(/etc/passwd) is denied."]
    assert json.loads(written[0]) == {"jsonrpc": "2.0", "id": 7, "result": {
        "outcome": {"outcome": "selected", "optionId": "reject"},
        "_meta": {"agentqueue": {"refusal": "Bash(rm x) is denied."}}}}  # the agent's answer as the channel made it
    assert session.finish(0).status == "completed"


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
