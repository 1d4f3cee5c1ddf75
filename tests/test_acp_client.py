"""An ACP agent's file and terminal requests, attacker's input: served only inside the worktree, through the policy,
terminal commands inside the OS sandbox (engine/acp_client.py). Real files, symlinks, policy and bubblewrap."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from agentqueue.engine.acp_actions import tool_call_input
from agentqueue.engine.acp_client import AcpChannel, sandboxed
from agentqueue.engine.permissions import PermissionChannel
from agentqueue.services import Services
from agentqueue.services.cpu_priority import _own_autogroup_nice

pytestmark = [pytest.mark.anyio, pytest.mark.integration]  # bubblewrap runs the terminals


@pytest.fixture
def tree(services: Services, tmp_path: Path) -> Path:
    services.projects.create("Demo")
    root = tmp_path / "worktree"
    root.mkdir()
    (root / "inside.txt").write_text("one\ntwo\nthree\n")
    (tmp_path / "secret.txt").write_text("SECRET")
    os.symlink(tmp_path / "secret.txt", root / "link.txt")  # a link pointing out of the tree
    os.symlink(tmp_path, root / "out")  # a directory link pointing out
    return root


def channel(services: Services, root: Path) -> AcpChannel:
    permissions = PermissionChannel(services, "demo", None, "acp-test", root)  # no task: an ask is a deny
    contain = sandboxed(services, root, "demo", None, "standard", None, "agent:acp-test")
    return AcpChannel(permissions, contain, dict(os.environ))


async def call(chan: AcpChannel, method: str, **params: Any) -> dict[str, Any]:
    return await chan.answer({"jsonrpc": "2.0", "id": 1, "method": method, "params": {"sessionId": "s", **params}})


@pytest.mark.parametrize("path", ["{tmp}/secret.txt", "{root}/../secret.txt", "../secret.txt", "{root}/link.txt",
                                  "{root}/out/secret.txt", "/etc/passwd", "{root}-evil/x"])
async def test_reads_outside_the_worktree_are_refused(services: Services, tree: Path, path: str) -> None:
    chan = channel(services, tree)
    answer = await call(chan, "fs/read_text_file", path=path.format(tmp=tree.parent, root=tree))
    assert "result" not in answer
    assert "outside this task's worktree" in answer["error"]["message"], answer


@pytest.mark.parametrize("path", ["{tmp}/planted.txt", "{root}/../planted.txt", "{root}/out/planted.txt",
                                  "{root}/link.txt"])
async def test_writes_outside_the_worktree_are_refused_and_change_nothing(services: Services, tree: Path,
                                                                         path: str) -> None:
    chan = channel(services, tree)
    answer = await call(chan, "fs/write_text_file", path=path.format(tmp=tree.parent, root=tree), content="PWNED")
    assert "outside this task's worktree" in answer["error"]["message"], answer
    assert not (tree.parent / "planted.txt").exists()
    assert (tree.parent / "secret.txt").read_text() == "SECRET"


async def test_reads_and_writes_inside_the_worktree_are_served(services: Services, tree: Path) -> None:
    chan = channel(services, tree)
    answer = await call(chan, "fs/read_text_file", path=str(tree / "inside.txt"), line=2, limit=1)
    assert answer == {"result": {"content": "two\n"}}
    answer = await call(chan, "fs/write_text_file", path=str(tree / "sub" / "new.txt"), content="made")
    assert answer == {"result": {}} and (tree / "sub" / "new.txt").read_text() == "made"


async def test_a_denied_write_is_refused_by_the_policy(services: Services, tree: Path) -> None:
    services.policies.edit(project_id="demo", add_rule="Edit(./protected.txt)", rule_list="deny")
    answer = await call(channel(services, tree), "fs/write_text_file", path=str(tree / "protected.txt"), content="x")
    assert "Edit(./protected.txt)" in answer["error"]["message"] and not (tree / "protected.txt").exists()


async def test_a_terminal_command_runs_in_the_sandbox_in_the_worktree(services: Services, tree: Path) -> None:
    for rule in ("Bash(pwd)", "Bash(touch:*)", "Bash(cat:*)"):
        services.policies.edit(project_id="demo", add_rule=rule, rule_list="allow")
    chan = channel(services, tree)
    try:
        created = await call(chan, "terminal/create", command="pwd; touch made_here; cat ../secret.txt")
        assert created.get("result", {}).get("terminalId"), created
        term = created["result"]["terminalId"]
        exited = await call(chan, "terminal/wait_for_exit", terminalId=term)
        assert "exitCode" in exited["result"]
        output = (await call(chan, "terminal/output", terminalId=term))["result"]
        assert str(tree) in output["output"] and (tree / "made_here").exists()
        if services.sandbox.unavailable() is None:  # bubblewrap: outside the tree is read-only, the secret readable
            assert (await call(chan, "terminal/create", command="touch ../escaped"))["result"]
            await call(chan, "terminal/wait_for_exit", terminalId="term-2")
            assert not (tree.parent / "escaped").exists()
        assert (await call(chan, "terminal/release", terminalId=term)) == {"result": {}}
        gone = await call(chan, "terminal/output", terminalId=term)
        assert "No terminal" in gone["error"]["message"]
    finally:
        chan.close()


async def test_a_compound_command_needs_every_part_allowed(services: Services, tree: Path) -> None:
    services.policies.edit(project_id="demo", add_rule="Bash(echo:*)", rule_list="allow")
    services.policies.edit(project_id="demo", add_rule="Bash(touch:*)", rule_list="deny")
    chan = channel(services, tree)
    try:
        for command in ("echo hi & touch BAD_MARKER", "echo hi; touch BAD_MARKER", "echo $(touch BAD_MARKER)"):
            answer = await call(chan, "terminal/create", command=command)
            assert "error" in answer and "touch" in answer["error"]["message"], (command, answer)
        answer = await call(chan, "terminal/create", command="echo", args=["hi;", "touch", "BAD_MARKER"])
        assert "result" in answer  # args are quoted: one echo of three words, no second command
        await call(chan, "terminal/wait_for_exit", terminalId=answer["result"]["terminalId"])
        assert not list(tree.rglob("BAD_MARKER"))
        outside = await call(chan, "terminal/create", command="echo hi", cwd="/etc")
        assert "outside this task's worktree" in outside["error"]["message"]
    finally:
        chan.close()


async def test_a_terminals_variables_are_decided_with_its_command(services: Services, tree: Path) -> None:
    """`ls` is allowed, but `ls` with PATH pointing at a script the agent wrote (or LD_PRELOAD, BASH_ENV) is another
    command: the policy decides it as typed `PATH=./bin ls`, and standard asks (here: nobody to ask, a deny)."""
    services.policies.edit(project_id="demo", add_rule="Bash(ls:*)", rule_list="allow")
    (tree / "bin").mkdir()
    (tree / "bin" / "ls").write_text("#!/bin/sh\ntouch PLANTED_RAN\n")
    (tree / "bin" / "ls").chmod(0o755)
    chan = channel(services, tree)
    try:
        for name, value in (("PATH", f"{tree}/bin:/usr/bin:/bin"), ("LD_PRELOAD", f"{tree}/evil.so"),
                            ("BASH_ENV", f"{tree}/evil.sh")):
            answer = await call(chan, "terminal/create", command="ls", env=[{"name": name, "value": value}])
            assert "error" in answer and name in answer["error"]["message"], (name, answer)
        bad = await call(chan, "terminal/create", command="ls", env=[{"name": "X;touch PLANTED_RAN", "value": "1"}])
        assert "Not an environment variable name" in bad["error"]["message"]
        plain = await call(chan, "terminal/create", command="ls", env=[{"name": "LC_ALL", "value": "C"}])
        assert "result" in plain, plain  # a harmless variable still runs the allowed command
        await call(chan, "terminal/wait_for_exit", terminalId=plain["result"]["terminalId"])
        assert not list(tree.rglob("PLANTED_RAN"))
    finally:
        chan.close()


async def test_malformed_and_unknown_requests_get_errors(services: Services, tree: Path) -> None:
    chan = channel(services, tree)
    assert (await call(chan, "fs/read_text_file"))["error"]["code"] == -32602  # no path
    assert (await call(chan, "fs/delete_everything", path="/"))["error"]["code"] == -32601
    assert "No terminal" in (await call(chan, "terminal/kill", terminalId="term-99"))["error"]["message"]


async def test_a_permission_request_is_decided_by_the_policy(services: Services, tree: Path) -> None:
    services.policies.edit(project_id="demo", add_rule="Bash(rm:*)", rule_list="deny")
    chan = channel(services, tree)
    options = [{"optionId": "always", "name": "Always", "kind": "allow_always"},
               {"optionId": "once", "name": "Allow", "kind": "allow_once"},
               {"optionId": "no", "name": "Reject", "kind": "reject_once"}]
    denied = await call(chan, "session/request_permission", options=options,
                        toolCall={"toolCallId": "t1", "title": "ls && rm -rf /", "kind": "execute"})
    assert denied["result"]["outcome"] == {"outcome": "selected", "optionId": "no"}
    # ACP's reject has no message: the reason (the rule, how to lift it) rides in `_meta`, for the session to tell the
    # model as its next prompt (tests/test_acp_agent.py, test_acp_gemini.py).
    reason = denied["result"]["_meta"]["agentqueue"]["refusal"]
    assert "Bash(rm:*)" in reason and "remove_rule='Bash(rm:*)'" in reason and "Do not retry" in reason, reason
    allowed = await call(chan, "session/request_permission", options=options,
                         toolCall={"toolCallId": "t2", "title": "git status", "kind": "execute"})
    assert allowed == {"result": {"outcome": {"outcome": "selected", "optionId": "once"}}}  # never "always"


def test_the_tool_call_mapping(tmp_path: Path) -> None:
    assert tool_call_input({"kind": "execute", "title": "npm test"}, tmp_path) == ("Bash", {"command": "npm test"})
    assert tool_call_input({"kind": "execute", "title": "x", "rawInput": {"command": ["rm", "-rf", "a b"]}},
                           tmp_path) == ("Bash", {"command": "rm -rf 'a b'"})
    assert tool_call_input({"kind": "edit", "locations": [{"path": "/t/a.py"}]}, tmp_path) == (
        "Edit", {"file_path": "/t/a.py"})
    assert tool_call_input({"kind": "read", "rawInput": {"file_path": "/t/b"}}, tmp_path) == (
        "Read", {"file_path": "/t/b"})
    assert tool_call_input({"kind": "fetch", "rawInput": {"url": "https://x.org/a"}}, tmp_path)[0] == "WebFetch"
    assert tool_call_input({"kind": "other", "toolCallId": "mcp_agentqueue_create_task__1"}, tmp_path) == (
        "mcp__agentqueue", {})
    assert tool_call_input({"kind": "other", "title": "weird"}, tmp_path) == ("Acp(weird)", {})


async def test_a_planted_settings_file_is_served_as_the_default_branch_has_it_and_never_written(
        services: Services, tree: Path) -> None:
    planted = tree / ".gemini" / "settings.json"
    planted.parent.mkdir()
    planted.write_text('{"planted": true}')
    permissions = PermissionChannel(services, "demo", None, "acp-test", tree)
    chan = AcpChannel(permissions, sandboxed(services, tree, "demo", None, "standard", None, "agent:acp-test"),
                      dict(os.environ), masks={planted: b'{"default": true}', tree / ".mcp.json": None})
    assert (await call(chan, "fs/read_text_file", path=str(planted)))["result"] == {"content": '{"default": true}'}
    assert "cannot be read" in (await call(chan, "fs/read_text_file", path=str(tree / ".mcp.json")))["error"][
        "message"]
    refused = await call(chan, "fs/write_text_file", path=str(planted), content="{}")
    assert "earlier, unmerged run" in refused["error"]["message"]
    assert planted.read_text() == '{"planted": true}'


async def test_a_terminal_runs_as_far_below_the_daemon_as_its_agent(services: Services, tree: Path) -> None:
    """A terminal is the agent's work in a session of its own: [engine] agent_nice lowers it as it lowers the agent
    (services/cpu_priority.py), or an ACP agent's `npm test` would run ahead of the daemon's landings."""
    for rule in ("Bash(cat:*)", "Bash(sleep:*)"):  # a pause first: the engine lowers it just after it starts
        services.policies.edit(project_id="demo", add_rule=rule, rule_list="allow")
    permissions = PermissionChannel(services, "demo", None, "acp-test", tree)
    contain = sandboxed(services, tree, "demo", None, "standard", None, "agent:acp-test")
    chan = AcpChannel(permissions, contain, dict(os.environ), nice=10)
    try:
        created = await call(chan, "terminal/create", command="sleep 0.3; cat /proc/self/stat /proc/self/autogroup")
        assert "result" in created, created
        term = created["result"]["terminalId"]
        await call(chan, "terminal/wait_for_exit", terminalId=term)
        output = (await call(chan, "terminal/output", terminalId=term))["result"]["output"]
    finally:
        chan.close()
    stat = output.splitlines()[0]
    assert int(stat[stat.rindex(")") + 2:].split()[16]) == min(os.getpriority(os.PRIO_PROCESS, 0) + 10, 19), output
    if "autogroup" in output:
        assert output.rstrip().endswith(f"nice {min(_own_autogroup_nice() + 10, 19)}"), output
