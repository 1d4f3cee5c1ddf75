"""The ACP preset table (engine/adapters/acp_presets.py) without running an agent: the argv each preset starts, the
refusal when its adapter is not installed, and Codex's token totals read from a rollout file.

tests/test_acp_presets.py runs the real adapters; these are the edges it does not reach.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from agentqueue.engine.adapters import acp_presets, codex_rollout
from agentqueue.services import Services
from agentqueue.services.errors import InvalidInputError


def test_the_codex_preset_asks_before_commands_and_takes_a_model_as_a_toml_string() -> None:
    argv = acp_presets.argv_of("codex", "standard", "/opt/codex-acp", 'gpt-"5"')
    assert argv == ["/opt/codex-acp", "-c", 'approval_policy="untrusted"', "-c", 'sandbox_mode="danger-full-access"',
                    "-c", 'model="gpt-\\"5\\""']


def test_the_claude_preset_takes_no_model_flag_and_starts_in_manual_mode_without_bypass() -> None:
    preset = acp_presets.preset_of("claude-code")
    assert preset is not None
    assert acp_presets.argv_of("claude-code", "standard", "/opt/claude-agent-acp", "sonnet") == [
        "/opt/claude-agent-acp"]
    assert (preset.session_mode, preset.model_config) == ("default", "model")
    options = preset.session_meta["claudeCode"]["options"]
    assert options["allowDangerouslySkipPermissions"] is False
    assert {"Bash", "Edit", "Write", "Read", "WebFetch"} <= set(options["settings"]["permissions"]["ask"])


def test_an_acp_presets_run_gets_its_clis_sandbox_state_and_endpoints() -> None:
    from agentqueue.sandbox.cli_homes import person_folder
    from agentqueue.sandbox.rules import endpoints_of

    assert acp_presets.sandbox_kind("acp", "claude-code") == "claude-code"
    assert acp_presets.sandbox_kind("acp", "codex") == "codex"
    assert acp_presets.sandbox_kind("acp", "./my-agent --acp") == "acp"
    assert acp_presets.sandbox_kind("codex", None) == "codex"
    # Without ANTHROPIC_BASE_URL the adapter talks to Anthropic's API, and its run's state is a copy of ~/.claude.
    assert "api.anthropic.com:443" in endpoints_of({}, acp_presets.sandbox_kind("acp", "claude-code"))
    assert person_folder(acp_presets.sandbox_kind("acp", "claude-code"), {"HOME": "/h"}) == Path("/h/.claude")


@pytest.mark.parametrize(("command", "program", "variable", "package"), [
    ("claude-code", "claude-agent-acp", "AGENTQUEUE_CLAUDE_AGENT_ACP_BIN", "@agentclientprotocol/claude-agent-acp"),
    ("codex", "codex-acp", "AGENTQUEUE_CODEX_ACP_BIN", "@zed-industries/codex-acp")])
def test_a_preset_whose_adapter_is_missing_is_refused_with_where_to_get_it(
        services: Services, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str, program: str,
        variable: str, package: str) -> None:
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv(variable, raising=False)
    with pytest.raises(InvalidInputError) as refused:
        services.agents.create("acp", "acp", command=command)
    message = str(refused.value)
    assert program in message and variable in message and package in message and "[cli]" in message, message
    assert services.agents.list()[1] == 0  # nothing was created


def test_a_preset_whose_adapter_is_installed_is_found_by_its_variable(services: Services, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    adapter = tmp_path / "codex-acp"
    adapter.write_text("#!/bin/sh\nexit 0\n")
    adapter.chmod(0o755)
    monkeypatch.setenv("AGENTQUEUE_CODEX_ACP_BIN", str(adapter))
    agent = services.agents.create("acp", "acp", command="codex")
    assert (agent.agent_type, agent.command) == ("acp", "codex")
    assert services.settings.find("codex-acp") == str(adapter)


def _rollout(home: Path, session_id: str, lines: list[str]) -> None:
    day = home / "sessions" / "2026" / "11" / "26"
    day.mkdir(parents=True, exist_ok=True)
    (day / f"rollout-2026-11-26T09-36-27-{session_id}.jsonl").write_text("\n".join(lines) + "\n")


def _token_count(total: dict[str, int]) -> str:
    return json.dumps({"type": "event_msg", "payload": {"type": "token_count", "info": {
        "total_token_usage": total, "last_token_usage": total, "model_context_window": 258400}}})


def test_codex_tokens_are_the_last_token_count_of_the_sessions_rollout(tmp_path: Path) -> None:
    """The shape codex-acp 0.16.0 (Codex 0.137.0) writes: cumulative totals, cached inside input."""
    session = "01a21736-a8d5-79d1-8618-0875d00ceb42"
    _rollout(tmp_path, session, [
        json.dumps({"type": "turn_context", "payload": {"model": "gpt-5.5"}}),
        _token_count({"input_tokens": 120, "cached_input_tokens": 20, "output_tokens": 30, "total_tokens": 150}),
        json.dumps({"type": "event_msg", "payload": {"type": "token_count", "info": None}}),  # a rate-limit update
        _token_count({"input_tokens": 270, "cached_input_tokens": 80, "output_tokens": 42, "total_tokens": 312}),
        '{"type": "event_msg", "payload": {"type": "token_co',  # cut short while Codex wrote it
    ])
    assert codex_rollout.session_usage(session, tmp_path) == (
        "gpt-5.5", {"input": 190, "output": 42, "cache_read": 80, "cache_write": 0, "total": 312})


def test_no_rollout_or_no_count_or_a_path_for_an_id_is_no_figure(tmp_path: Path) -> None:
    _rollout(tmp_path, "no-count", [json.dumps({"type": "turn_context", "payload": {"model": "gpt-5.5"}})])
    assert codex_rollout.session_usage("no-count", tmp_path) is None
    assert codex_rollout.session_usage("missing", tmp_path) is None
    assert codex_rollout.session_usage("../../etc/passwd", tmp_path) is None
    assert codex_rollout.session_usage("*", tmp_path) is None


def test_codex_home_is_codex_home_else_dot_codex_under_home() -> None:
    assert codex_rollout.codex_home({"CODEX_HOME": "/x/codex", "HOME": "/h"}) == Path("/x/codex")
    assert codex_rollout.codex_home({"HOME": "/h"}) == Path("/h/.codex")


@pytest.mark.anyio
async def test_an_acp_preset_is_registered_without_asking_and_a_program_still_asks(
        server: Any, services: Services, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A preset's name runs a CLI AgentQueue knows (as agent_type gemini does); any other ACP command is a program of
    the person's and is asked about (tool:run_command), here by a client that cannot ask, so it is refused."""
    adapter = tmp_path / "claude-agent-acp"
    adapter.write_text("#!/bin/sh\nexit 0\n")
    adapter.chmod(0o755)
    monkeypatch.setenv("AGENTQUEUE_CLAUDE_AGENT_ACP_BIN", str(adapter))
    async with Client(server, mode="legacy") as client:  # no elicitation: an ask is refused
        made = await client.call_tool("create_agent", {"name": "acp", "agent_type": "acp", "command": "claude-code"})
        assert not made.is_error, made.content
        asked = await client.call_tool("create_agent", {"name": "other", "agent_type": "acp",
                                                        "command": str(adapter)})
        assert asked.is_error and "tool:run_command" in str(asked.content), asked.content
    assert [a.id for a in services.agents.list()[0]] == ["acp"]


def test_install_records_the_adapters_where_the_terminal_finds_them_and_the_daemon_reads_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agentqueue import settings
    from agentqueue.cli import agent_cli_paths

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for program in ("claude-agent-acp", "codex-acp"):
        (bin_dir / program).write_text("#!/bin/sh\nexit 0\n")
        (bin_dir / program).chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    for variable in ("AGENTQUEUE_CLAUDE_AGENT_ACP_BIN", "AGENTQUEUE_CODEX_ACP_BIN"):
        monkeypatch.delenv(variable, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    assert agent_cli_paths.record(home) is not None
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))  # a daemon started with a GUI's PATH
    loaded = settings.load(home)
    assert loaded.find("claude-agent-acp") == str(bin_dir / "claude-agent-acp")
    assert loaded.find("codex-acp") == str(bin_dir / "codex-acp")


def _update(call_id: str, **fields: Any) -> str:
    return json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": {
        "sessionId": "s", "update": {"toolCallId": call_id, **fields}}})


def test_claudes_calls_reach_the_watchdog_with_their_input_not_as_empty_announcements() -> None:
    """claude-agent-acp 0.101.0 announces a Bash call as {"title": "Terminal", "rawInput": {}} and sends its input in
    a tool_call_update; told at the announcement, every call would look the same to the loop detector."""
    from agentqueue.engine.adapters.acp import AcpSession

    session = AcpSession("p", [])
    events = []
    for call_id, command in (("toolu_1", "make test"), ("toolu_2", "git status")):
        events += session.feed(_update(call_id, sessionUpdate="tool_call", title="Terminal", kind="execute",
                                       status="pending", content=[], rawInput={}))
        events += session.feed(_update(call_id, sessionUpdate="tool_call_update", title=command,
                                       rawInput={"command": command, "description": "run it"}))
        events += session.feed(_update(call_id, sessionUpdate="tool_call_update", status="completed",
                                       rawOutput="ok"))
    calls = [(e.tool, e.args) for e in events if e.kind == "tool_call"]
    assert calls == [("execute", {"command": "make test", "description": "run it"}),
                     ("execute", {"command": "git status", "description": "run it"})]
    assert [e.kind for e in events].count("tool_result") == 2


def test_an_announced_call_whose_input_never_comes_is_told_when_it_ends() -> None:
    from agentqueue.engine.adapters.acp import AcpSession

    session = AcpSession("p", [])
    events = session.feed(_update("t1", sessionUpdate="tool_call", title="Tool", kind="other", rawInput={}))
    events += session.feed(_update("t1", sessionUpdate="tool_call_update", status="failed", content=[]))
    assert [e.kind for e in events] == ["tool_call", "tool_result"]
