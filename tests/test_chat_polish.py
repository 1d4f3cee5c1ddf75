"""`agentqueue chat`'s rough edges of issue 23, with the REAL `claude` CLI on the loopback model mock: the footer
fits 80 columns, an interrupted turn shows its tokens, a 429 is told once with the next step, and `-p` keeps
errors off stdout, and a ToolSearch step shows as the tool line it leads to (on a pty, and on recorded event
lines for a search that fails)."""

from __future__ import annotations

import json
import queue
from typing import Any

import pytest

from agentqueue.chat.claude import Line
from agentqueue.chat.turns import Conversation

from .cli_helpers import LiveDaemon, run_cli
from .mock_anthropic import USAGE
from .test_chat import ANSI, CLAUDE, Chat, live, mock_api  # noqa: F401  (live, mock_api: fixtures)



@pytest.mark.usefixtures("mock_api")
@pytest.mark.daemon
@pytest.mark.real_cli
@pytest.mark.integration
@pytest.mark.skipif(CLAUDE is None, reason="claude CLI not installed (.ci/run installs it)")
def test_an_interrupted_turn_shows_its_tokens_in_a_footer_that_fits_80_columns(live: LiveDaemon) -> None:  # noqa: F811
    live.env["COLUMNS"] = "80"
    with Chat(live) as chat:
        chat.wait("you › ")
        chat.say("SCENARIO:midway take your time")
        chat.wait("Thinking it over…")
        chat.ctrl_c()
        screen = chat.wait("── interrupted")
        chat.wait("you › ", 2)
        assert chat.leave() == 0
    line = next(row for row in ANSI.sub("", screen).replace("\r", "\n").split("\n") if "── interrupted" in row)
    line = line[line.index("──"):].rstrip()
    assert len(line) <= 80, (len(line), line)
    assert f"{USAGE['input_tokens']} in · " in line and " out" in line, line  # the tokens the stream reported
    assert not line.startswith("── interrupted · 0 in · 0 out"), line


@pytest.mark.usefixtures("mock_api")
@pytest.mark.daemon
@pytest.mark.real_cli
@pytest.mark.integration
@pytest.mark.skipif(CLAUDE is None, reason="claude CLI not installed (.ci/run installs it)")
def test_a_429_is_told_once_with_the_next_step_and_p_keeps_errors_off_stdout(live: LiveDaemon) -> None:  # noqa: F811
    retried = {**live.env, "CLAUDE_CODE_MAX_RETRIES": "2"}  # claude retries twice before it gives up
    done = run_cli(retried, "chat", "-p", "SCENARIO:rate_limit hi", timeout=180)
    assert done.returncode == 1
    assert done.stdout == "", done.stdout  # a script reading the answer gets no error text as if it were one
    lines = [row for row in done.stderr.splitlines() if row.strip()]
    assert len([row for row in lines if "claude retries by itself" in row]) == 1, done.stderr  # not once per retry
    errors = [row for row in lines if row.startswith("agentqueue chat:")]
    assert len(errors) == 1 and "429" in errors[0] and "Wait a minute" in errors[0], done.stderr
    assert "API Error" not in "".join(row for row in lines if row not in errors), done.stderr
    # On a terminal: the same, once, and the chat stays open.
    live.env["CLAUDE_CODE_MAX_RETRIES"] = "2"
    with Chat(live) as chat:
        chat.wait("you › ")
        chat.say("SCENARIO:rate_limit again")
        screen = chat.wait("Wait a minute")
        chat.wait("you › ", 2)
        assert chat.leave() == 0
    assert screen.count("claude retries by itself") == 1 and screen.count("API Error") == 1, screen


@pytest.mark.usefixtures("mock_api")
@pytest.mark.daemon
@pytest.mark.real_cli
@pytest.mark.integration
@pytest.mark.skipif(CLAUDE is None, reason="claude CLI not installed (.ci/run installs it)")
def test_a_toolsearch_step_shows_as_the_tool_line_it_leads_to_on_a_pty(live: LiveDaemon) -> None:  # noqa: F811
    live.env["ENABLE_TOOL_SEARCH"] = "true"  # claude defers MCP tools and offers ToolSearch to find them
    with Chat(live) as chat:
        chat.wait("you › ")
        chat.say("SCENARIO:search_create TITLE[Found by search]")
        screen = chat.wait("Created: ")
        chat.wait("you › ", 2)
        assert chat.leave() == 0
    assert "⚙ create_task  project_id=demo  title=Found by search" in screen, screen
    assert "ToolSearch" not in screen and "select:" not in screen, screen  # one line: the tool it led to
    titles = {t["title"] for t in live.call("list_tasks", project_id="demo", include_completed=True)["tasks"]}
    assert "Found by search" in titles


class Recorded:
    """claude's stream-json lines as it printed them, played to a Conversation (the chat's process interface)."""

    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.events: queue.Queue[Any] = queue.Queue()
        for event in [*events, {"type": "result", "subtype": "success", "is_error": False, "result": "",
                                "session_id": "s", "total_cost_usd": 0.0, "usage": {}}]:
            self.events.put(Line(json.dumps(event), event))

    def send(self, text: str) -> bool:
        return True


class Shown:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def text(self, chunk: str) -> None:
        self.lines.append(f"text {chunk}")

    def tool_call(self, name: str, arguments: dict[str, Any]) -> None:
        self.lines.append(f"call {name}")

    def tool_result(self, summary: str, is_error: bool) -> None:
        self.lines.append(f"result {summary}")

    def note(self, message: str) -> None:
        self.lines.append(f"note {message}")


def tool_use(tool_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "assistant", "message": {"id": f"m-{tool_id}", "model": "claude", "content": [
        {"type": "tool_use", "id": tool_id, "name": name, "input": arguments}]}}


def tool_result(tool_id: str, text: str, is_error: bool = False) -> dict[str, Any]:
    return {"type": "user", "message": {"content": [
        {"type": "tool_result", "tool_use_id": tool_id, "content": text, "is_error": is_error}]}}


def test_a_toolsearch_step_is_folded_into_the_tool_line_it_leads_to() -> None:
    shown = Shown()
    conversation = Conversation(Recorded([  # type: ignore[arg-type]
        tool_use("t1", "ToolSearch", {"query": "select:mcp__agentqueue__create_task"}),
        tool_result("t1", "Found 1 tool: mcp__agentqueue__create_task"),
        tool_use("t2", "mcp__agentqueue__create_task", {"title": "x"}),
        tool_result("t2", '{"id": "brave-otter", "status": "READY"}'),
        tool_use("t3", "ToolSearch", {"query": "nothing"}),
        tool_result("t3", "No such tool", is_error=True),
    ]))
    turn = conversation.turn("hi", shown)  # type: ignore[arg-type]
    assert shown.lines == ["call create_task", "result id=brave-otter status=READY",
                           "call ToolSearch", "result No such tool"], shown.lines  # a failed search stays visible
    assert [c["name"] for c in turn.tool_calls] == ["ToolSearch", "create_task", "ToolSearch"]  # --json keeps all
