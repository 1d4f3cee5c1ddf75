"""The second red team's findings against the MCP server, its tools and its transports (issue 18), each attacked.

The official MCP client against the server in memory, the real plugin and daemon, the standalone server on
real stdio, and a real `claude` agent (against the loopback model mock) that runs its own `agentqueue mcp`
and tries to act for a person.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from agentqueue import daemon, paths
from agentqueue.server.app import build_server
from agentqueue.services import Services
from agentqueue.settings import load
from agentqueue.store.sqlite import SqliteStore as Store
from agentqueue.server.toolsets import NAMED_TOOLSETS
from agentqueue.wire import refusal

from .cli_helpers import let_agents_see_signals, signals
from .conftest import db_snapshot, fail, ok
from .git_fixtures import make_repo
from .processes import claude_env, wait_for
from .test_permissions_mcp import Person, mode

pytestmark = [pytest.mark.both_eras, pytest.mark.anyio]


def pending_request(services: Services, action: str = "Bash(touch PWNED)") -> Any:
    services.projects.create("Demo")
    task = services.tasks.create("demo", "Work", "do it")
    return services.requests.open(task.id, "claude", "Bash", {"command": action[5:-1]}, action, "make a file",
                                  "Bash(touch:*)", 600)


def allow_rules(services: Services) -> list[str]:
    return [r["rule"] for r in services.policies.effective("demo").describe()["allow"]]


# -- 1. answer_request asks a person before it grants; remember=true asks like edit_policy ----------------------

async def test_an_allow_answer_asks_a_person_and_a_decline_changes_nothing(server, services, era):
    request = pending_request(services)
    before = db_snapshot(services)
    async with Client(server, mode=mode(era)) as cannot_ask:
        text = await fail(cannot_ask, "answer_request", request_id=request.id, decision="allow")
        assert "cannot ask" in text and "tool:answer_request:allow" in text
    no = Person("decline")
    async with Client(server, mode=mode(era), elicitation_callback=no) as client:
        assert "Declined: nothing was changed." in await fail(client, "answer_request", request_id=request.id,
                                                              decision="allow")
    assert db_snapshot(services) == before and services.requests.get(request.id).status == "pending"
    [question] = no.questions
    assert "Bash(touch PWNED)" in question and request.id in question and "demo" in question
    yes = Person()
    async with Client(server, mode=mode(era), elicitation_callback=yes) as client:
        answered = await ok(client, "answer_request", request_id=request.id, decision="allow")
    assert answered["status"] == "allowed" and len(yes.questions) == 1
    rows = services.audit.query(limit=10, action="tool:answer_request*")
    assert [r.decision for r in rows] == ["ask→accept", "ask→decline", "ask→refused"]


async def test_a_deny_answer_needs_no_question_but_remembering_it_does(server, services, era):
    request = pending_request(services)
    rules = services.policies.effective("demo").describe()
    async with Client(server, mode=mode(era)) as cannot_ask:
        # Remembering writes a rule into the policy: the same question as edit_policy, refused without a person.
        text = await fail(cannot_ask, "answer_request", request_id=request.id, decision="deny", remember=True)
        assert "cannot ask" in text and "tool:edit_policy" in text
        assert services.requests.get(request.id).status == "pending"
        assert services.policies.effective("demo").describe() == rules
        denied = await ok(cannot_ask, "answer_request", request_id=request.id, decision="deny")
    assert denied["status"] == "denied"


async def test_remember_tells_the_person_which_rule_it_adds(server, services, era):
    request = pending_request(services)
    no = Person("decline")
    async with Client(server, mode=mode(era), elicitation_callback=no) as client:
        await fail(client, "answer_request", request_id=request.id, decision="allow", remember=True)
    assert "Bash(touch:*)" not in allow_rules(services)
    assert "add `Bash(touch:*)` to the allow list" in no.questions[0]
    yes = Person()
    async with Client(server, mode=mode(era), elicitation_callback=yes) as client:
        await ok(client, "answer_request", request_id=request.id, decision="allow", remember=True)
    assert "Bash(touch:*)" in allow_rules(services)


# -- 4. approve_task asks when approving merges into the default branch ----------------------------------------

async def test_approving_a_task_that_merges_into_the_default_branch_asks(server, services, tmp_path, era):
    services.projects.create("Demo")
    repo = services.repos.add("demo", "init", name="app")
    task = services.tasks.create("demo", "Feature", "do it", repo_id=repo.id)
    services.tasks.set_status(task.id, "AWAITING_APPROVAL")
    with services.store.transaction() as db:
        db["tasks"].update(task.id, {"branch": f"{task.id}/feature"})
    async with Client(server, mode=mode(era)) as cannot_ask:
        text = await fail(cannot_ask, "approve_task", task_id=task.id)
    assert "cannot ask" in text and f"tool:merge_into_default:app {task.id}/feature" in text
    no = Person("decline")
    async with Client(server, mode=mode(era), elicitation_callback=no) as client:
        await fail(client, "approve_task", task_id=task.id)
    assert services.tasks.get(task.id).status == "AWAITING_APPROVAL"
    assert "the default branch of repo app" in no.questions[0] and "main" in no.questions[0]
    # A task whose work lives in a pull request merges nothing here: approving it asks nobody.
    with services.store.transaction() as db:
        db["tasks"].update(task.id, {"pr_url": "https://example.test/pr/1"})
    async with Client(server, mode=mode(era)) as cannot_ask:
        assert (await ok(cannot_ask, "approve_task", task_id=task.id))["status"] == "COMPLETED"


# -- 7. a local clone source is judged against [files] roots like a linked path ----------------------------------

@pytest.mark.parametrize("spelling", ["path", "file-url"])
async def test_a_local_clone_source_outside_the_roots_asks_and_a_decline_copies_nothing(server, services, home,
                                                                                         tmp_path, era, spelling):
    code = tmp_path / "code"
    code.mkdir()
    (home / "config.toml").write_text(f'[files]\nroots = ["{code}"]\n')
    services.settings = load(home)
    secret = make_repo(tmp_path / "password-store", files={"bank.gpg": "SECRET-BANK-PIN\n"})
    url = str(secret) if spelling == "path" else f"file://{secret}"
    workspace = Path(services.projects.create("Demo").workspace)
    before = db_snapshot(services)
    async with Client(server, mode=mode(era)) as cannot_ask:
        text = await fail(cannot_ask, "add_repo", project_id="demo", source="clone", url=url, name="loot")
        assert "outside_roots" in text and str(secret) in text
    no = Person("decline")
    async with Client(server, mode=mode(era), elicitation_callback=no) as client:
        assert "Declined" in await fail(client, "add_repo", project_id="demo", source="clone", url=url, name="loot")
    assert str(secret) in no.questions[0]
    assert db_snapshot(services) == before and not (workspace / "repos" / "loot").exists()
    assert not [p for p in workspace.rglob("bank.gpg")]
    # A source inside the roots is cloned without asking.
    inside = make_repo(code / "app")
    async with Client(server, mode=mode(era)) as cannot_ask:
        await ok(cannot_ask, "add_repo", project_id="demo", source="clone", url=str(inside), name="app")


# -- 8. edit_agent's command is bounded like create_agent's, and a refusal never echoes it whole -----------------

async def test_a_huge_command_for_edit_agent_is_refused_at_once_without_echo(server, services):
    services.agents.create("runner", "command", command="/bin/cat")
    async with Client(server) as client:
        started = time.monotonic()
        text = await fail(client, "edit_agent", agent_id="runner", command="x" * 1_000_000)
        assert time.monotonic() - started < 5 and len(text) < 1000 and "100000" in text
        text = await fail(client, "edit_agent", agent_id="runner", command="'" + "q" * 50_000)
        assert "cannot be parsed" in text and len(text) < 1000 and "50,001 characters" in text
        text = await fail(client, "edit_agent", agent_id="runner", command="y" * 90_000)
        assert "is not an executable" in text and len(text) < 1000
    assert services.agents.get("runner").command == "/bin/cat"


# -- 6. an oversized id is a clear error, on SQLite and on PostgreSQL, leaking no database text --------------------

@pytest.mark.parametrize("store_backend", ["sqlite", "postgres"])
async def test_an_oversized_id_is_the_tools_own_error(server, services, store_backend):
    import secrets

    services.projects.create("Demo")
    huge = secrets.token_hex(50_000)  # 100 kB that does not compress: past PostgreSQL's btree limit
    before = db_snapshot(services)
    async with Client(server) as client:
        for tool, args in (("get_task", {"task_id": huge}), ("list_tasks", {"project_id": huge}),
                           ("create_task", {"project_id": huge, "title": "t", "description": "d"}),
                           ("create_task", {"project_id": "demo", "title": "t", "description": "d",
                                            "depends_on": [huge]}),
                           ("answer_request", {"request_id": huge, "decision": "deny"}),
                           ("set_project_channel", {"project_id": "demo", "channel_id": huge})):
            text = await fail(client, tool, **args)
            assert "ids are at most 255" in text and len(text) < 400, (tool, text[:300])
            assert "index" not in text and "bytes" not in text
    assert db_snapshot(services) == before
    rows = services.audit.query(limit=20)
    assert len(rows) == 6 and all(r.task_id is None and r.project_id in (None, "demo") for r in rows)


# -- 5. --toolsets and --read-only narrow resources too ----------------------------------------------------------

async def test_a_narrowed_connection_sees_only_its_tools_resources(services, era):
    services.projects.create("Demo")
    task = services.tasks.create("demo", "Work", "do it")
    narrowed = build_server(services, {"toolsets": ["tasks"], "read_only": True})
    async with Client(narrowed, mode=mode(era)) as client:
        listed = {str(r.uri) for r in (await client.list_resources()).resources}
        templates = {t.uri_template for t in (await client.list_resource_templates()).resource_templates}
        assert "agentqueue://audit" not in listed and "agentqueue://status" not in listed
        assert "agentqueue://approvals" not in listed and "agentqueue://projects" not in listed
        assert "agentqueue://tasks/{task_id}" in templates and "agentqueue://projects/{project_id}" not in templates
        assert not any("notes" in t for t in templates)
        with pytest.raises(MCPError, match="not available here"):
            await client.read_resource("agentqueue://audit")
        with pytest.raises(MCPError, match="not available here"):
            await client.read_resource("agentqueue://projects/demo")
        shown = json.loads((await client.read_resource(f"agentqueue://tasks/{task.id}")).contents[0].text)
        assert shown["id"] == task.id
    async with Client(build_server(services, {"toolsets": ["policy"]}), mode=mode(era)) as client:
        listed = {str(r.uri) for r in (await client.list_resources()).resources}
        assert "agentqueue://audit" in listed and "agentqueue://status" not in listed
    async with Client(build_server(services), mode=mode(era)) as whole:
        assert "agentqueue://audit" in {str(r.uri) for r in (await whole.list_resources()).resources}


async def test_a_narrowed_connection_cannot_subscribe_to_a_hidden_resource(services):
    narrowed = build_server(services, {"toolsets": ["notes"]})
    async with Client(narrowed, mode="legacy") as client:
        with pytest.raises(MCPError, match="not available here"):
            await client.subscribe_resource("agentqueue://audit")
    # 2026: a listen stream is honoured only for the resources the connection is offered.
    async with Client(narrowed) as client:
        note = "agentqueue://projects/demo/notes/plan"
        async with client.listen(resource_subscriptions=["agentqueue://audit", note]) as subscription:
            assert list(subscription.honored.resource_subscriptions or []) == [note]


# -- 9. the standalone server answers bad lines as the plugin does -----------------------------------------------

BAD_LINES = [b"not json\n", b"[{\"jsonrpc\": \"2.0\", \"id\": 5, \"method\": \"ping\"}]\n", b"7\n",
             b"{\"jsonrpc\": \"2.0\", \"id\": 9, \"method\": \"tools/call\", \"params\": {\"name\": \"get_task\", "
             b"\"arguments\": {\"task_id\": \"\\ud800\"}}}\n", b"\xff\xfe\n"]


@pytest.mark.daemon
def test_the_standalone_server_answers_bad_lines_like_the_plugin(tmp_path: Path) -> None:
    hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "redteam", "version": "1"}}}
    lines = [json.dumps(hello).encode() + b"\n", *BAD_LINES, b'{"jsonrpc": "2.0", "id": 2, "method": "ping"}\n']
    env = {**os.environ, "AGENTQUEUE_HOME": str(tmp_path / "home")}
    server = subprocess.Popen([sys.executable, "-m", "agentqueue", "mcp", "--standalone"], env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        server.stdin.write(b"".join(lines))
        server.stdin.flush()
        answers: list[dict] = []
        reader = threading.Thread(target=lambda: answers.extend(
            json.loads(server.stdout.readline() or "null") for _ in range(2 + len(BAD_LINES))), daemon=True)
        reader.start()
        reader.join(timeout=60)  # a line left unanswered would leave the client waiting forever
        assert not reader.is_alive(), f"the server left lines unanswered; it answered only {answers}"
    finally:
        server.stdin.close()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
    expected = [json.loads(refusal(line)[1]) for line in BAD_LINES]  # what the plugin answers
    assert [a for a in answers if a.get("id") not in (1, 2)] == expected
    assert [e["id"] for e in expected] == [None, None, None, 9, None]
    assert {"id": 2, "jsonrpc": "2.0", "result": {}} in answers


# -- 10. a home or socket folder the plugin cannot use is one sentence ---------------------------------------------

def plugin_run(env: dict[str, str], stdin: bytes) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "agentqueue", "mcp"], env=env, input=stdin, capture_output=True,
                          timeout=60)


def test_an_unusable_socket_folder_is_one_sentence_not_a_traceback(tmp_path: Path) -> None:
    runtime = tmp_path / "run"
    (runtime / "agentqueue").mkdir(parents=True)
    os.chmod(runtime / "agentqueue", 0o777)  # another user could have made it: refused
    long_home = tmp_path / ("h" * 110) / "home"  # too long for AF_UNIX: the socket goes to the runtime folder
    env = {**os.environ, "AGENTQUEUE_HOME": str(long_home), "XDG_RUNTIME_DIR": str(runtime)}
    done = plugin_run(env, b"")
    said = done.stderr.decode()
    assert done.returncode != 0 and done.stdout == b"" and "Traceback" not in said
    assert str(runtime / "agentqueue") in said and "not a private folder" in said and len(said.splitlines()) == 1


def test_a_home_that_cannot_be_a_folder_is_one_sentence_and_the_client_gets_an_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    env = {**os.environ, "AGENTQUEUE_HOME": str(blocker / "home")}
    hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "redteam", "version": "1"}}}
    done = plugin_run(env, json.dumps(hello).encode() + b"\n")
    said = done.stderr.decode()
    assert done.returncode != 0 and "Traceback" not in said
    assert str(blocker / "home") in said and "AGENTQUEUE_HOME" in said
    [answer] = [json.loads(line) for line in done.stdout.splitlines()]  # mid-handshake: one error, nothing else
    assert (answer["id"] == 1 and answer["error"]["code"] == -32603
            and str(blocker / "home") in answer["error"]["message"])


# -- 3. the audit actor comes from the connection, never from what a client claims -------------------------------

def forged_plugin(home: Path, options: dict[str, Any]) -> StdioServerParameters:
    """The real plugin, sending a preamble that claims to be an agent working on a task."""
    code = f"from agentqueue.daemon import relay; relay.main({options!r})"
    return StdioServerParameters(command=sys.executable, args=["-c", code],
                                 env={**os.environ, "AGENTQUEUE_HOME": str(home), "AGENTQUEUE_PORT": "0"})


def audit_rows(home: Path, action: str) -> list[dict]:
    store = Store(paths.db_path(home))
    try:
        return store.all("SELECT action, actor, task_id, decision, outcome FROM audit_log WHERE action LIKE ? "
                         "ORDER BY id",
                         (action,))
    finally:
        store.close()


@pytest.mark.daemon
async def test_a_client_cannot_claim_an_agents_name_or_task(live_home: Path) -> None:
    server = subprocess.Popen([sys.executable, "-m", "agentqueue", "serve", "--port", "0"],
                              env={**os.environ, "AGENTQUEUE_HOME": str(live_home)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        await wait_for(lambda: (daemon.read_daemon_info(live_home) or {}).get("http_url"), 30, "the daemon")
        async with Client(forged_plugin(live_home, {})) as person:
            await ok(person, "create_project", name="Demo")
            parent = await ok(person, "create_task", title="Parent", description="p", project_id="demo")
        claim = {"actor": "agent:claude", "task_id": parent["id"], "toolsets": ["agent"]}
        async with Client(forged_plugin(live_home, claim)) as forger:
            # Narrowing is honoured; the name and the task are not.
            assert {t.name for t in (await forger.list_tools()).tools} == set(NAMED_TOOLSETS["agent"])
            child = await ok(forger, "create_task", title="Not a follow-up", description="c", project_id="demo")
        assert child["parent_task_id"] is None and child["depends_on"] == []
        [row] = [r for r in audit_rows(live_home, "tool:create_task") if r["outcome"] == "ok"][-1:]
        assert row["actor"].startswith("client:") and row["task_id"] is None
        # An HTTP client is named by the transport it came in on (its bearer token), not as a local client.
        info = daemon.read_daemon_info(live_home)
        token = paths.token_path(live_home).read_text().strip()
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http:
            async with Client(streamable_http_client(info["http_url"], http_client=http)) as remote:
                await ok(remote, "list_tasks", project_id="demo")
        assert audit_rows(live_home, "tool:list_tasks")[-1]["actor"].startswith("http:")
    finally:
        daemon.stop(live_home, timeout=15)
        if server.poll() is None:
            server.kill()


# -- 2. an agent's own processes are the agent: it can never act for a person ------------------------------------

ATTACK = r'''
import json, os, sys
import anyio
from mcp import Client, StdioServerParameters

async def main():
    # The agent starts its own plugin, asks for the person's toolsets and says it is a person.
    params = StdioServerParameters(command=sys.executable, args=["-m", "agentqueue", "mcp", "--toolsets",
                                   "requests,policy,tasks"], env={**os.environ, "AGENTQUEUE_HOME": sys.argv[1],
                                   "AGENTQUEUE_NO_START": "1", "AGENTQUEUE_ACTOR": "client:person"})
    out = {}
    async with Client(params, mode="legacy") as client:
        out["tools"] = sorted(t.name for t in (await client.list_tools()).tools)
        for name, args in (("answer_request", {"request_id": "req-0", "decision": "allow"}),
                           ("edit_policy", {"preset": "autonomous"}), ("approve_task", {"task_id": sys.argv[2]})):
            result = await client.call_tool(name, args)
            out[name] = [result.is_error, result.content[0].text[:200]]
    print("ATTACK " + json.dumps(out))

anyio.run(main)
'''


def attack_report(mock: Any) -> dict:
    """What the attack script printed, from the Bash tool result the model was sent."""
    for request in mock.messages_for("run_cmd"):
        for message in request["messages"]:
            for block in message["content"] if isinstance(message.get("content"), list) else []:
                if block.get("type") != "tool_result":
                    continue
                content = block.get("content")
                text = content if isinstance(content, str) else " ".join(
                    b.get("text", "") for b in content or [] if isinstance(b, dict))
                for line in text.splitlines():
                    if line.startswith("ATTACK "):
                        return json.loads(line[len("ATTACK "):])
    raise AssertionError("the attack script printed no report")


@pytest.mark.integration
@pytest.mark.daemon
@pytest.mark.real_cli
async def test_an_agent_that_runs_its_own_plugin_is_still_the_agent(tmp_path: Path) -> None:
    from .mock_anthropic import MockAnthropic
    from .test_engine_claude import CLAUDE

    if CLAUDE is None:
        pytest.skip("claude CLI not installed (.ci/run installs it)")
    mock = MockAnthropic().start()
    home = tmp_path / "aq"
    home.mkdir()
    (home / "policy.toml").write_text('preset = "autonomous"\n')  # no question stands between the agent and us
    script = signals(tmp_path) / "attack.py"  # where the sandbox lets the agent see it
    script.write_text(ATTACK)
    let_agents_see_signals(home)
    env = claude_env(tmp_path, mock.base_url, CLAUDE, AGENTQUEUE_HOME=str(home), AGENTQUEUE_POLL_SECONDS="0.1")
    server = subprocess.Popen([sys.executable, "-m", "agentqueue", "serve", "--no-http"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        await wait_for(lambda: (daemon.read_daemon_info(home) or {}).get("pid") == server.pid, 60, "the daemon")
        params = StdioServerParameters(command=sys.executable, args=["-m", "agentqueue", "mcp"], env=env)
        async with Client(params, mode="legacy") as person:
            await ok(person, "create_project", name="Demo")
            await ok(person, "add_repo", source="init", name="app", project_id="demo")
            command = f"{sys.executable} {script} {home} no-such-task"
            task = await ok(person, "create_task", title="Agent", project_id="demo",
                            description=f"SCENARIO:run_cmd CMD[{command}]")
        store = Store(paths.db_path(home))
        try:
            await wait_for(lambda: store.scalar("SELECT status FROM tasks WHERE id = ?", (task["id"],))
                           in ("COMPLETED", "FAILED", "BLOCKED"), 120, "the agent's run to end")
        finally:
            store.close()
        out = attack_report(mock)
        # Whatever it asked for and claimed, the connection got the agent toolset: no person's decision in it.
        assert out["tools"] == sorted(NAMED_TOOLSETS["agent"])
        for name in ("answer_request", "edit_policy", "approve_task"):
            assert out[name][0] and "not available here" in out[name][1], out
        assert 'preset = "autonomous"' in (home / "policy.toml").read_text() and "[projects" not in \
            (home / "policy.toml").read_text()
        # Audited as the agent, against its own task (approve_task names the task it acted on).
        refused = {r["action"]: r for r in audit_rows(home, "tool:%") if r["outcome"] == "refused"}
        assert sorted(refused) == ["tool:answer_request", "tool:approve_task", "tool:edit_policy"]
        assert {r["actor"] for r in refused.values()} == {"agent:claude"}
        assert (refused["tool:edit_policy"]["task_id"] == task["id"]
                and refused["tool:edit_policy"]["decision"] == "deny")
    finally:
        daemon.stop(home, timeout=15)
        if server.poll() is None:
            server.kill()
        mock.stop()


@pytest.mark.daemon
async def test_a_process_the_daemon_started_outside_a_run_is_no_person_either(tmp_path: Path) -> None:
    """A hook's shell step (or a verify command: code a task wrote) that opens its own plugin connection."""
    home = tmp_path / "aq"
    home.mkdir()
    (home / "policy.toml").write_text('preset = "autonomous"\n')  # nothing asks: only the connection's identity stands
    script = tmp_path / "attack.py"
    script.write_text(ATTACK)
    # Sandboxed, a shell step cannot reach the daemon's socket at all; this is the machine with no sandbox (a
    # person set required = false), where the connection's identity is what stands.
    (home / "config.toml").write_text("[sandbox]\nrequired = false\n")
    env = {**os.environ, "AGENTQUEUE_HOME": str(home), "AGENTQUEUE_BWRAP": str(tmp_path / "no-bwrap")}
    server = subprocess.Popen([sys.executable, "-m", "agentqueue", "serve", "--no-http"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        await wait_for(lambda: (daemon.read_daemon_info(home) or {}).get("pid") == server.pid, 60, "the daemon")
        params = StdioServerParameters(command=sys.executable, args=["-m", "agentqueue", "mcp"], env=env)
        async with Client(params, mode="legacy") as person:
            await ok(person, "create_project", name="Demo")
            hook = await ok(person, "create_hook", project_id="demo", name="sneaky", action="create_task",
                            trigger={"type": "periodic", "interval_seconds": 3600},
                            task_template={"title": "t", "description": "d"},
                            context_steps=[{"type": "shell", "command": f"{sys.executable} {script} {home} none",
                                            "timeout": 60}])
            fired = await ok(person, "fire_hook", hook_id=hook["id"])
        store = Store(paths.db_path(home))
        try:
            await wait_for(lambda: store.scalar("SELECT status FROM hook_runs WHERE id = ?", (fired["run_id"],))
                           in ("completed", "failed", "skipped"), 90, "the hook run to end")
            context = json.loads(store.scalar("SELECT context_results FROM hook_runs WHERE id = ?",
                                              (fired["run_id"],)))
        finally:
            store.close()
        [report] = [line for line in context[0]["stdout"].splitlines() if line.startswith("ATTACK ")]
        out = json.loads(report[len("ATTACK "):])
        assert ("answer_request" not in out["tools"] and "edit_policy" not in out["tools"]
                and "list_requests" in out["tools"])
        for name in ("answer_request", "edit_policy", "approve_task"):
            assert out[name][0] and "not available here" in out[name][1] and "person's decision" in out[name][1], out
        assert (home / "policy.toml").read_text() == 'preset = "autonomous"\n'
        actors = {r["actor"] for r in audit_rows(home, "tool:%") if r["outcome"] == "refused"}
        assert len(actors) == 1 and actors.pop().startswith("process:")
    finally:
        daemon.stop(home, timeout=15)
        if server.poll() is None:
            server.kill()
