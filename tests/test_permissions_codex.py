"""Codex at Claude Code's level (issue 24): the REAL `codex` CLI, run as `codex app-server`, under AgentQueue's policy.

The loopback Responses-API mock (tests/mock_openai.py) scripts the model: a shell command written as CMD[...] in the
task, a patch (`apply_patch` through the shell, which Codex turns into a file change), an MCP call, or a loop. Codex
asks the engine about every command, patch and MCP call; the policy decides each as it does Claude Code's. The
person's side is the official MCP client (`list_requests`, `get_task`, `answer_request`), as in
tests/test_permissions_claude.py, whose tests these mirror.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from agentqueue import daemon, paths
from agentqueue.engine.adapters.prices import openai_cost
from agentqueue.engine.orchestrator import Engine
from agentqueue.services import Services
from agentqueue.store.sqlite import SqliteStore as Store

from . import mock_openai as mock
from .conftest import ok
from .processes import alive, wait_for, parent_and_follow_up
from .engine_runs import engine_and_person
from .third_party import npm_bin

CODEX = npm_bin("codex")
pytestmark = [pytest.mark.real_cli, pytest.mark.anyio, pytest.mark.integration,
              pytest.mark.skipif(CODEX is None, reason="codex CLI not installed (.ci/run installs it)")]

PATCH = "apply_patch <<'EOF'\\n*** Begin Patch\\n*** Add File: patched.txt\\n+patched\\n*** End Patch\\nEOF\\n"


@pytest.fixture
def codex_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    api = mock.MockOpenAI().start()
    for key, value in {**mock.codex_home(tmp_path, api.base_url, model=mock.PRICED_MODEL),
                       "AGENTQUEUE_CODEX_BIN": CODEX}.items():
        monkeypatch.setenv(key, value)
    yield api
    api.stop()


@pytest.fixture
def queue(services: Services, codex_api: mock.MockOpenAI) -> Services:
    services.projects.create("Demo")
    services.repos.add("demo", "init", name="app")
    services.agents.create("codex", "codex")
    return services




def status(services: Services, task_id: str) -> str:
    return services.tasks.get(task_id).status


def completed(services: Services, engine: Engine, task_id: str) -> bool:
    """Whether the task completed; when not, the assertion says why (its reason and its log)."""
    task = services.tasks.get(task_id)
    assert task.status == "COMPLETED", (task.status, task.reason, engine.log_path(task_id).read_text()[-3000:])
    return True


def told(api: mock.MockOpenAI) -> str:
    """What the model was last told after its calls: the tool outputs and AgentQueue's messages of the turn."""
    last = api.requests[-1]
    return json.dumps(mock.call_outputs(last)) + mock.said_after_calls(last)


def on_main(services: Services, name: str) -> str | None:
    repo = services.repos.get("app").checkout_path
    done = subprocess.run(["git", "show", f"main:{name}"], cwd=repo, capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else None


def anywhere(services: Services, name: str) -> list[Path]:
    """Every file of that name the run could have made: in the repo, its worktrees, or one level above them."""
    root = Path(services.repos.get("app").checkout_path).parent
    # os.walk, not rglob: a folder the daemon removes meanwhile (a run's git admin set aside) is skipped, not an error.
    return [Path(folder, name) for top in (root, services.home) for folder, dirs, files in os.walk(top)
            if name in files or name in dirs]


def audited(services: Services, task_id: str, action: str) -> list[tuple[str, str]]:
    rows = services.audit.query(limit=100, task_id=task_id, action=action)
    return [(r.decision, r.outcome) for r in reversed(rows) if r.actor == "agent:codex"]


async def until_settled(services: Services, task_id: str) -> None:
    await wait_for(lambda: status(services, task_id) in ("COMPLETED", "BLOCKED", "FAILED"), 90, "the run to end")


async def test_a_denied_command_never_runs_and_the_model_is_told(queue: Services, codex_api: mock.MockOpenAI) -> None:
    queue.policies.edit(project_id="demo", add_rule="Bash(touch:*)", rule_list="deny")
    task = queue.tasks.create("demo", "Deny", "SCENARIO:run_cmd CMD[touch DENIED_MARKER]", max_retries=0)
    async with engine_and_person(queue) as (engine, _):
        await until_settled(queue, task.id)
    assert completed(queue, engine, task.id)
    assert on_main(queue, "DENIED_MARKER") is None and not anywhere(queue, "DENIED_MARKER")
    said = told(codex_api)
    assert "rejected by user" in said  # Codex's own word for a decline...
    assert "denied by AgentQueue's policy" in said and "Bash(touch:*)" in said, said  # ...and ours, mid-turn
    assert queue.requests.list(None) == []  # a deny asks nobody
    assert audited(queue, task.id, "Bash(touch DENIED_MARKER)") == [("deny", "refused")]


async def test_an_allowed_command_runs_and_the_run_is_paid_for(queue: Services, codex_api: mock.MockOpenAI) -> None:
    queue.policies.edit(project_id="demo", add_rule="Bash(touch:*)", rule_list="allow")
    task = queue.tasks.create("demo", "Allow", "SCENARIO:run_cmd CMD[touch ALLOWED_MARKER]", max_retries=0)
    async with engine_and_person(queue) as (engine, _):
        await until_settled(queue, task.id)
    assert completed(queue, engine, task.id)
    assert on_main(queue, "ALLOWED_MARKER") == ""  # the file the command made landed on main
    assert audited(queue, task.id, "Bash(touch ALLOWED_MARKER)") == [("allow", "ok")]
    # Tokens and cost in the ledger: the mock's two responses, priced as gpt-5-codex one response at a time.
    steps = codex_api.steps_sent
    assert steps == ["tool_call", "final"]
    used = mock.expected_turn_usage(*steps)
    row = queue.store.one("SELECT input, output, cache_read, cache_write, total, cost_usd FROM token_ledger "
                          "WHERE task_id = ?", (task.id,))
    assert (row["input"], row["output"], row["cache_read"], row["cache_write"], row["total"]) == (
        used["input_tokens"] - used["cached_input_tokens"], used["output_tokens"], used["cached_input_tokens"], 0,
        used["input_tokens"] + used["output_tokens"])
    per_step = [mock.expected_turn_usage(s) for s in steps]
    expected = sum(openai_cost(mock.PRICED_MODEL, {"input": u["input_tokens"] - u["cached_input_tokens"],
                                                   "cache_read": u["cached_input_tokens"],
                                                   "output": u["output_tokens"]}) or 0 for u in per_step)
    assert expected > 0 and row["cost_usd"] == pytest.approx(expected)
    # $1.25 per million uncached input, $0.125 cached, $10 output (gpt-5-codex's page):
    assert expected == pytest.approx((190 * 1.25 + 80 * 0.125 + 42 * 10) / 1_000_000)


@pytest.mark.parametrize("decision", ["allow", "deny"])
async def test_an_ask_waits_for_a_person_and_the_same_run_goes_on(queue: Services, codex_api: mock.MockOpenAI,
                                                                  decision: str) -> None:
    task = queue.tasks.create("demo", "Ask", "SCENARIO:run_cmd CMD[touch ASKED_MARKER]", max_retries=0)
    async with engine_and_person(queue) as (engine, client):
        await wait_for(lambda: status(queue, task.id) == "WAITING_INPUT", 90, "the task to wait for a person")
        agent_pid = queue.store.scalar("SELECT pid FROM agents WHERE id = 'codex'")
        assert agent_pid and alive(agent_pid)
        pending = (await ok(client, "list_requests", project_id="demo"))["requests"]
        assert len(pending) == 1 and pending[0]["action"] == "Bash(touch ASKED_MARKER)"
        assert pending[0]["task_id"] == task.id and pending[0]["suggested_rule"] == "Bash(touch ASKED_MARKER)"
        shown = await ok(client, "get_task", task_id=task.id)
        assert shown["status"] == "WAITING_INPUT" and shown["pending_requests"][0]["id"] == pending[0]["id"]
        assert not anywhere(queue, "ASKED_MARKER")  # nothing ran while the person thinks
        answered = await ok(client, "answer_request", request_id=pending[0]["id"], decision=decision)
        assert answered["status"] == ("allowed" if decision == "allow" else "denied")
        await until_settled(queue, task.id)
    assert completed(queue, engine, task.id)
    attempts, _ = queue.tasks.results(task.id)
    assert attempts == 1  # one run in the ledger: the same process, not a retry
    assert queue.store.scalar("SELECT count(*) FROM token_ledger WHERE task_id = ?", (task.id,)) == 1
    assert engine.log_path(task.id).read_text().count("$ ") == 1  # one spawn
    if decision == "allow":
        assert on_main(queue, "ASKED_MARKER") == ""
    else:
        assert on_main(queue, "ASKED_MARKER") is None and not anywhere(queue, "ASKED_MARKER")
        assert "A person denied Bash(touch ASKED_MARKER)" in told(codex_api)
    expected = ("ask→accept", "ok") if decision == "allow" else ("ask→decline", "refused")
    assert audited(queue, task.id, "Bash(touch ASKED_MARKER)") == [expected]


async def test_an_unanswered_request_times_out_into_a_deny(queue: Services, codex_api: mock.MockOpenAI) -> None:
    queue.policies.edit(project_id="demo", ask_timeout="1s")
    task = queue.tasks.create("demo", "Nobody", "SCENARIO:run_cmd CMD[touch LATE_MARKER]", max_retries=0)
    async with engine_and_person(queue) as (engine, _):
        await until_settled(queue, task.id)
    assert completed(queue, engine, task.id)
    (request,) = queue.requests.list(None, task_id=task.id)
    assert request.status == "expired" and request.decided_by == "timeout"
    assert not anywhere(queue, "LATE_MARKER") and "Nobody answered" in told(codex_api)
    assert audited(queue, task.id, "Bash(touch LATE_MARKER)") == [("ask→timeout", "refused")]


async def test_stop_task_while_waiting_blocks_it_and_closes_the_request(queue: Services) -> None:
    task = queue.tasks.create("demo", "Stop me", "SCENARIO:run_cmd CMD[touch STOPPED_MARKER]", max_retries=0)
    async with engine_and_person(queue) as (engine, client):
        await wait_for(lambda: status(queue, task.id) == "WAITING_INPUT", 90, "the task to wait")
        agent_pid = queue.store.scalar("SELECT pid FROM agents WHERE id = 'codex'")
        await ok(client, "stop_task", task_id=task.id)
        await wait_for(lambda: task.id not in engine.running, 60, "the run to end")
    assert status(queue, task.id) == "BLOCKED" and not alive(agent_pid)
    (request,) = queue.requests.list(None, task_id=task.id)
    assert request.status == "expired" and request.decided_by == "run ended"
    assert not anywhere(queue, "STOPPED_MARKER")


@pytest.mark.parametrize("command, parts", [
    ("ls & touch PWNED_BG; echo owned > outside.txt", ["touch PWNED_BG"]),
    ("echo $(touch PWNED_SUBST)", ["touch PWNED_SUBST"]),
    ("true; touch PWNED_SEQ", ["touch PWNED_SEQ"]),
])
async def test_a_hostile_command_is_decided_part_by_part(queue: Services, codex_api: mock.MockOpenAI,
                                                         command: str, parts: list[str]) -> None:
    """`&`, `;` and `$(…)`: Codex asks about the whole script, the policy judges each simple command in it, and one
    denied part refuses the whole (the red team's command: nothing of it runs)."""
    queue.policies.edit(project_id="demo", add_rule="Bash(touch:*)", rule_list="deny")
    task = queue.tasks.create("demo", "Hostile", f"SCENARIO:run_cmd CMD[{command}]END", max_retries=0)
    async with engine_and_person(queue) as (engine, _):
        await until_settled(queue, task.id)
    assert completed(queue, engine, task.id)
    for name in ("PWNED_BG", "PWNED_SUBST", "PWNED_SEQ", "outside.txt"):
        assert not anywhere(queue, name), name
    said = told(codex_api)
    assert all(part in said for part in parts) and "Bash(touch:*)" in said, said
    assert audited(queue, task.id, f"Bash({command})") == [("deny", "refused")]


def test_an_interactive_shell_codex_would_type_into_asks_even_when_a_rule_allows_it(queue: Services) -> None:
    """Codex's `write_stdin` into a session it started is not asked about (0.169 sends no question), so a shell
    started bare would run whatever is typed into it unseen. The policy asks about such a shell (it reads commands
    the parser cannot see: issue 33), even when a person's rule allows `Bash(bash)`: the old known limit is closed
    at the start of the session, not at each keystroke."""
    from agentqueue.services.policy_rules import agent_action

    queue.policies.edit(project_id="demo", add_rule="Bash(bash)", rule_list="allow")
    verdict = queue.policies.decide(agent_action("Bash", {"command": "bash"}, Path("/work/tree")), "demo")
    assert verdict.decision == "ask", verdict
    assert "standard input" in str(verdict.decided_by), verdict.decided_by


@pytest.mark.parametrize("rule_list", ["allow", "deny"])
async def test_a_patch_is_decided_path_by_path(queue: Services, codex_api: mock.MockOpenAI, rule_list: str) -> None:
    """Codex's file changes (`apply_patch`) come as their own question, after the item that names the paths."""
    queue.policies.edit(project_id="demo", add_rule="Write(patched.txt)", rule_list=rule_list)
    task = queue.tasks.create("demo", "Patch", f"SCENARIO:run_cmd CMD[{PATCH}]END", max_retries=0)
    async with engine_and_person(queue) as (engine, _):
        await until_settled(queue, task.id)
    assert completed(queue, engine, task.id)
    rows = [r for r in queue.audit.query(limit=100, task_id=task.id) if r.actor == "agent:codex"]
    writes = [(r.action, r.decision) for r in rows if r.action.startswith("Write(")]
    assert len(writes) == 1 and writes[0][0].endswith("/patched.txt)") and writes[0][1] == rule_list, rows
    if rule_list == "allow":
        assert on_main(queue, "patched.txt") == "patched"
    else:
        assert on_main(queue, "patched.txt") is None and not anywhere(queue, "patched.txt")
        assert "denied by AgentQueue's policy" in told(codex_api)


async def test_a_loop_warning_reaches_the_model_in_the_same_run(queue: Services, codex_api: mock.MockOpenAI) -> None:
    task = queue.tasks.create("demo", "Loop", "SCENARIO:loop keep going", max_retries=0)
    async with engine_and_person(queue) as (engine, _):
        await until_settled(queue, task.id)
    log = engine.log_path(task.id).read_text()
    assert "warned the agent in this run" in log, log
    warned = [r for r in codex_api.requests if "AgentQueue watchdog" in mock.said_after_calls(r)]
    assert warned, "the mock never saw the warning"
    assert completed(queue, engine, task.id)  # the model stopped on being told: no kill
    assert queue.tasks.results(task.id)[1].summary.endswith("Warned.")
    assert log.count("$ ") == 1


async def test_the_readonly_preset_denies_a_write_and_the_walls_still_stand(queue: Services,
                                                                           codex_api: mock.MockOpenAI) -> None:
    """readonly: the policy refuses the write before it runs; a person's allow rule lets the call through, and
    AgentQueue's sandbox (the worktree mounted read-only) still refuses it."""
    queue.policies.edit(project_id="demo", preset="readonly")
    first = queue.tasks.create("demo", "Refused", "SCENARIO:run_cmd CMD[touch RO_MARKER]", max_retries=0)
    async with engine_and_person(queue):
        await until_settled(queue, first.id)
    assert "denied by AgentQueue's policy" in told(codex_api) and not anywhere(queue, "RO_MARKER")
    queue.policies.edit(project_id="demo", add_rule="Bash(touch:*)", rule_list="allow")
    second = queue.tasks.create("demo", "Walls", "SCENARIO:run_cmd CMD[touch RO_MARKER]", max_retries=0)
    async with engine_and_person(queue):
        await until_settled(queue, second.id)
    assert "Read-only file system" in told(codex_api), told(codex_api)
    assert on_main(queue, "RO_MARKER") is None and not anywhere(queue, "RO_MARKER")
    assert audited(queue, second.id, "Bash(touch RO_MARKER)") == [("allow", "ok")]


@pytest.mark.parametrize("rule_list", ["allow", "deny"])
async def test_another_mcp_servers_tool_is_decided_by_the_policy(queue: Services, codex_api: mock.MockOpenAI,
                                                                  rule_list: str) -> None:
    """An MCP server of the person's own Codex config: Codex asks before each call of an unannotated tool (an
    elicitation), and the policy decides `mcp__<server>__<tool>` as for Claude Code."""
    config = Path(os.environ["CODEX_HOME"]) / "config.toml"
    # Its source inline (`python -c`): a file in a checkout under /tmp is hidden by the sandbox's private /tmp.
    server = json.dumps(Path(__file__).with_name("mcp_marker_server.py").read_text())
    config.write_text(config.read_text() + f'\n[mcp_servers.marker]\ncommand = "{sys.executable}"\n'
                                           f'args = ["-c", {server}]\nstartup_timeout_sec = 60\n')
    queue.policies.edit(project_id="demo", add_rule="mcp__marker__make_marker", rule_list=rule_list)
    task = queue.tasks.create("demo", "MCP", 'SCENARIO:mcp_call TOOL[mcp__marker:make_marker] '
                                             'ARGS[{"name": "MCP_MARKER"}]END', max_retries=0)
    async with engine_and_person(queue) as (engine, _):
        await until_settled(queue, task.id)
    log = engine.log_path(task.id).read_text()
    assert completed(queue, engine, task.id)
    assert audited(queue, task.id, "mcp__marker__make_marker") == [
        (rule_list, "ok" if rule_list == "allow" else "refused")], log
    if rule_list == "allow":
        assert on_main(queue, "MCP_MARKER") == ""
    else:
        assert not anywhere(queue, "MCP_MARKER")
        assert "denied by AgentQueue's policy" in told(codex_api)


# -- AgentQueue's own tools, through the MCP server the engine now gives Codex --------------------------------------
@pytest.mark.daemon
async def test_codex_queues_a_follow_up_through_agentqueues_mcp_tools(tmp_path: Path) -> None:
    """The real daemon: Codex calls `create_task` of the `agent` toolset; the follow-up is the task's child."""
    api = mock.MockOpenAI().start()
    home = tmp_path / "aq"
    env = {**os.environ, **mock.codex_home(tmp_path, api.base_url), "AGENTQUEUE_CODEX_BIN": CODEX,
           "AGENTQUEUE_HOME": str(home), "AGENTQUEUE_POLL_SECONDS": "0.1", "AGENTQUEUE_MAX_TASK_DEPTH": "1"}
    server = subprocess.Popen([sys.executable, "-m", "agentqueue", "serve", "--no-http"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    store = None
    args = json.dumps({"title": "Follow-up through MCP", "description": "Queued by Codex through MCP."})
    try:
        await wait_for(lambda: (daemon.read_daemon_info(home) or {}).get("pid") == server.pid, 60, "the daemon")
        params = StdioServerParameters(command=sys.executable, args=["-m", "agentqueue", "mcp"], env=env)
        async with Client(params, mode="legacy") as client:
            await ok(client, "create_project", name="Demo")
            await ok(client, "add_repo", source="init", name="app", project_id="demo")
            await ok(client, "create_agent", name="codex", agent_type="codex")
            first = await ok(client, "create_task", title="Start", project_id="demo", agent_type="codex",
                             description=f"SCENARIO:mcp_call TOOL[mcp__agentqueue:create_task] ARGS[{args}]END")
        store = Store(paths.db_path(home))

        _, child = await parent_and_follow_up(store, home, 120)
        assert (child["title"], child["parent_task_id"], child["depth"]) == ("Follow-up through MCP", first["id"], 1)
        said = [mock.call_outputs(r) for r in api.requests if mock.call_outputs(r)]
        assert said and child["id"] in said[0][-1], said
        # AgentQueue's tools are annotated non-destructive and closed-world, so Codex calls them without asking; the
        # daemon's gate decides each call, as the run's own connection (agent:codex, held to the `agent` toolset).
        audit = store.all("SELECT action, decision FROM audit_log WHERE task_id = ? AND actor = 'agent:codex' AND "
                          "action LIKE 'tool:%'", (first["id"],))
        assert [(a["action"], a["decision"]) for a in audit] == [("tool:create_task", "allow")], audit
    finally:
        if store is not None:
            store.close()
        daemon.stop(home, timeout=15)
        if server.poll() is None:
            server.kill()
        api.stop()
