"""Any ACP agent (`create_agent(agent_type="acp", command=…)`) run by the engine: a scripted agent built on the
SDK's agent side (tests/acp_script_agent.py) asks permission, runs a client terminal, writes through fs/*, and
reports usage and a cost; the policy, the worktree and the ledger are AgentQueue's real ones."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from agentqueue.engine.adapters import acp_presets
from agentqueue.services import Services
from agentqueue.services.errors import InvalidInputError

from . import acp_script_agent as script
from .test_acp_gemini import ended, running, until
from .test_permissions_claude import on_main, status

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

AGENT = f"{sys.executable} {Path(script.__file__).resolve()}"


@pytest.fixture
def queue(services: Services) -> Services:
    services.projects.create("Demo")
    services.repos.add("demo", "init", name="app")
    services.agents.create("script", "acp", command=AGENT)
    return services


def summary(services: Services, task_id: str) -> str:
    _, result = services.tasks.results(task_id)
    return result.summary if result else ""


async def test_an_allowed_command_runs_in_a_client_terminal_and_usage_and_cost_reach_the_ledger(
        queue: Services) -> None:
    queue.policies.edit(project_id="demo", add_rule="Bash(touch:*)", rule_list="allow")
    task = queue.tasks.create("demo", "Go", "CMD[touch GENERIC_MARKER] WRITE[acp_written.txt]", max_retries=0)
    async with running(queue) as (engine, _):
        await until(ended(queue, task.id), "the run to end")
    log = engine.log_path(task.id).read_text()
    assert status(queue, task.id) == "COMPLETED", log
    said = summary(queue, task.id)
    assert "permission: allow-once" in said and "exit: 0" in said and "read back: written over ACP" in said, said
    assert on_main(queue, "GENERIC_MARKER") == "" and on_main(queue, "acp_written.txt") == "written over ACP"
    assert audited_as(queue, task.id, "Bash(touch GENERIC_MARKER)") == [("allow", "ok")]
    row = queue.store.one("SELECT input, output, cache_read, total, cost_usd FROM token_ledger WHERE task_id = ?",
                          (task.id,))
    u = script.USAGE
    assert (row["input"], row["output"], row["cache_read"], row["total"]) == (
        u["input"], u["output"] + u["thought"], u["cached"], sum(u.values())), row
    assert row["cost_usd"] == pytest.approx(script.COST)  # the agent's own usage_update cost
    assert "script agent: mcp servers [agentqueue]" in log  # AgentQueue's MCP server was in session/new


async def test_a_denied_command_never_runs(queue: Services) -> None:
    queue.policies.edit(project_id="demo", add_rule="Bash(touch:*)", rule_list="deny")
    task = queue.tasks.create("demo", "No", "CMD[touch DENIED_MARKER]", max_retries=0)
    async with running(queue):
        await until(ended(queue, task.id), "the run to end")
    said = summary(queue, task.id)
    assert "permission: reject" in said
    # ACP's reject carries no reason: the client sends it as the next prompt of the same session, once.
    assert said.count("told: AgentQueue refused your last tool call: Bash(touch DENIED_MARKER) is denied") == 1, said
    assert "remove_rule='Bash(touch:*)'" in said
    assert on_main(queue, "DENIED_MARKER") is None and not list((queue.home / "workspaces").rglob("DENIED_MARKER"))
    assert audited_as(queue, task.id, "Bash(touch DENIED_MARKER)") == [("deny", "refused")]


async def test_an_ask_parks_the_task_and_the_answer_lets_it_go_on(queue: Services) -> None:
    task = queue.tasks.create("demo", "Ask", "CMD[touch ASKED_MARKER]", max_retries=0)
    async with running(queue) as (engine, client):
        await until(lambda: status(queue, task.id) == "WAITING_INPUT", "the task to wait for a person")
        (request,) = queue.requests.list("pending")
        assert request.action == "Bash(touch ASKED_MARKER)"
        from .conftest import ok
        await ok(client, "answer_request", request_id=request.id, decision="allow")
        await until(ended(queue, task.id), "the run to end")
    assert status(queue, task.id) == "COMPLETED", engine.log_path(task.id).read_text()
    assert on_main(queue, "ASKED_MARKER") == ""
    assert engine.log_path(task.id).read_text().count("$ ") == 1


def audited_as(services: Services, task_id: str, action: str) -> list[tuple[str, str]]:
    rows = services.audit.query(limit=100, task_id=task_id, action=action)
    return [(r.decision, r.outcome) for r in reversed(rows) if r.actor == "agent:script"]


def test_registering_an_acp_agent_says_what_is_wrong(services: Services, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(acp_presets.PRESETS, "fake-acp", acp_presets.AcpPreset(("no-such-acp-prog", "--stdio"),
                                                                              install="npm install -g fake-acp"))
    with pytest.raises(InvalidInputError, match=r"'no-such-acp-prog' .* Install it \(npm install -g fake-acp\)"):
        services.agents.create("p", "acp", command="fake-acp")  # a preset's own program, not its name
    with pytest.raises(InvalidInputError, match="needs `command`: a preset name"):
        services.agents.create("a", "acp")
    with pytest.raises(InvalidInputError, match="no-such-acp-agent"):
        services.agents.create("b", "acp", command="no-such-acp-agent --stdio")
    with pytest.raises(InvalidInputError, match="only for agent_type 'command' or 'acp'"):
        services.agents.create("c", "codex", command="x")
    assert services.agents.list(50, 0)[1] == 0  # nothing was registered
