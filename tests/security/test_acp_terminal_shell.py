"""An ACP terminal (and AgentQueue's own run_command) runs its command in the shell whose grammar the policy
judged it by. `echo $'\\' ;touch M; echo \\'` is one echo to bash; dash (Debian's /bin/sh) reads `$` and a
quoted backslash, then runs `touch M`. The policy allows the echo, so the shell that runs it must be bash."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from agentqueue.engine.acp_actions import tool_call_input
from agentqueue.engine.acp_client import AcpChannel, sandboxed
from agentqueue.engine.permissions import PermissionChannel
from agentqueue.services import Services, shell
from agentqueue.services.policy import Policies
from agentqueue.services.policy_rules import agent_action

pytestmark = [pytest.mark.anyio, pytest.mark.integration]  # bubblewrap runs the terminals

TRICK = "echo $'\\' ;touch M; echo \\'\n'"


def test_the_trick_is_one_echo_to_bash_and_a_touch_to_dash(tmp_path: Path) -> None:
    if not os.path.exists("/bin/dash"):
        pytest.skip("no dash to show the difference with")
    subprocess.run(["/bin/dash", "-c", TRICK], cwd=tmp_path, capture_output=True, timeout=60)
    assert (tmp_path / "M").exists()
    (tmp_path / "M").unlink()
    subprocess.run(["bash", "-c", TRICK], cwd=tmp_path, capture_output=True, timeout=60)
    assert not (tmp_path / "M").exists()
    assert [c.words[0] for c in shell.analyse(TRICK).commands] == ["echo"]  # what the policy judges


@pytest.fixture
def tree(services: Services, tmp_path: Path) -> Path:
    services.projects.create("Demo")
    root = tmp_path / "worktree"
    root.mkdir()
    return root


async def call(chan: AcpChannel, method: str, **params: Any) -> dict[str, Any]:
    return await chan.answer({"jsonrpc": "2.0", "id": 1, "method": method, "params": {"sessionId": "s", **params}})


async def test_an_acp_terminal_runs_what_the_policy_judged(services: Services, tree: Path) -> None:
    permissions = PermissionChannel(services, "demo", None, "acp-test", tree)
    chan = AcpChannel(permissions, sandboxed(services, tree, "demo", None, "standard", None, "agent:acp-test"),
                      dict(os.environ))
    try:
        created = await call(chan, "terminal/create", command=TRICK)
        assert "result" in created, created  # standard allows an echo
        await call(chan, "terminal/wait_for_exit", terminalId=created["result"]["terminalId"])
        output = (await call(chan, "terminal/output", terminalId=created["result"]["terminalId"]))["result"]
        assert not (tree / "M").exists(), output
        assert ";touch M;" in output["output"]
    finally:
        chan.close()


def test_run_command_runs_what_the_policy_judged(services: Services, tree: Path) -> None:
    result = services.files.run(TRICK, tree)
    assert not (tree / "M").exists(), result


@pytest.mark.parametrize("argv", [["/bin/sh", "-c", TRICK], ["dash", "-c", TRICK], ["sh", "-lc", TRICK]])
def test_a_string_for_sh_is_not_judged_by_bashs_reading(presets: dict[str, Policies], tmp_path: Path,
                                                         argv: list[str]) -> None:
    tool, given = tool_call_input({"kind": "execute", "rawInput": {"command": argv}}, tmp_path)
    verdict = presets["standard"].decide(agent_action(tool, given, tmp_path))
    assert verdict.decision == "ask", verdict.decided_by
    assert "reads otherwise than bash" in verdict.decided_by
    verdict = presets["readonly"].decide(agent_action(tool, given, tmp_path))
    assert verdict.decision == "deny", verdict.decided_by
