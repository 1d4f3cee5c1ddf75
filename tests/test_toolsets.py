"""`--read-only` and `--toolsets`: a connection offers only the tools it was opened with.

Real processes: the plugin as clients launch it (its flags travel to the daemon in a preamble line),
the standalone server, and the daemon's own flags for HTTP clients. A hidden tool is left out of
`tools/list`, and a call to it is refused, audited and changes nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from agentqueue import daemon, paths
from agentqueue.store.sqlite import SqliteStore as Store
from agentqueue.tools import SPECS
from agentqueue.toolsets import NAMED_TOOLSETS

from .conftest import ok
from .processes import wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


def env_for(home: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "AGENTQUEUE_HOME": str(home), "AGENTQUEUE_PORT": "0", **extra}


def plugin(home: Path, *flags: str, **extra: str) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["-m", "agentqueue", "mcp", *flags],
                                 env=env_for(home, **extra))


async def names(client: Client) -> set[str]:
    return {t.name for t in (await client.list_tools()).tools}


def read_only_in(*groups: str) -> set[str]:
    return {s.name for s in SPECS.values() if s.group in groups and s.read_only}


def last_audit_row(home: Path, action: str) -> dict:
    store = Store(paths.db_path(home))
    try:
        row = store.one("SELECT * FROM audit_log WHERE action = ? ORDER BY id DESC LIMIT 1", (action,))
    finally:
        store.close()
    assert row is not None, f"no audit row for {action}"
    return row


async def test_a_limited_plugin_and_a_full_one_share_a_daemon(live_home: Path) -> None:
    async with Client(plugin(live_home, "--read-only", "--toolsets", "tasks,notes"), mode="legacy") as limited:
        assert await names(limited) == read_only_in("tasks", "notes")
        async with Client(plugin(live_home)) as full:
            assert await names(full) == set(SPECS)
            await ok(full, "create_project", name="Demo")
        # A hidden tool is refused, says why and how to get it, and changes nothing.
        refused = await limited.call_tool("create_task", {"title": "T", "description": "d", "project_id": "demo"})
        text = refused.content[0].text
        assert refused.is_error and "not available here" in text and "read-only" in text
        listed = await ok(limited, "list_tasks", project_id="demo")
        assert listed["tasks"] == []
    row = last_audit_row(live_home, "tool:create_task")
    assert (row["decision"], row["outcome"]) == ("deny", "refused") and "read-only" in row["decided_by"]


async def test_the_agent_toolset_narrows_but_the_environment_names_nobody(live_home: Path) -> None:
    async with Client(plugin(live_home)) as person:
        await ok(person, "create_project", name="Demo")
        parent = await ok(person, "create_task", title="Parent", description="the task an agent works on",
                          project_id="demo")
    # The agent toolset is a narrowing anyone may ask for; the task and the name an environment claims are not
    # believed (the daemon knows a task's agent by its process: tests/test_agent_tools.py, test_redteam_mcp.py).
    agent = plugin(live_home, "--toolsets", "agent", AGENTQUEUE_TASK_ID=parent["id"], AGENTQUEUE_ACTOR="agent:a1")
    async with Client(agent) as client:
        assert await names(client) == set(NAMED_TOOLSETS["agent"])
        child = await ok(client, "create_task", title="Follow-up", description="queued", project_id="demo")
    assert child["project_id"] == "demo" and child["parent_task_id"] is None and child["depends_on"] == []
    row = last_audit_row(live_home, "tool:create_task")
    assert row["actor"].startswith("client:") and (row["task_id"], row["outcome"]) == (None, "ok")


async def test_the_standalone_server_takes_the_same_flags(tmp_path: Path) -> None:
    params = StdioServerParameters(command=sys.executable, args=["-m", "agentqueue", "mcp", "--standalone",
                                                                 "--toolsets", "policy,system", "--read-only"],
                                   env=env_for(tmp_path / "home"))
    async with Client(params) as client:
        assert await names(client) == read_only_in("policy", "system")


def test_an_unknown_toolset_is_refused_before_anything_starts(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "agentqueue", "mcp", "--toolsets", "tasks,tsaks"],
                          env=env_for(tmp_path / "home"), capture_output=True, text=True, timeout=30,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and "unknown toolset(s) tsaks" in done.stderr and "choose from" in done.stderr
    assert not (tmp_path / "home" / "daemon.json").exists()


async def test_the_daemons_flags_limit_its_http_clients_only(live_home: Path) -> None:
    server = subprocess.Popen([sys.executable, "-m", "agentqueue", "serve", "--port", "0", "--read-only"],
                              env=env_for(live_home), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        await wait_for(lambda: (daemon.read_daemon_info(live_home) or {}).get("http_url"), 30, "the daemon")
        info = daemon.read_daemon_info(live_home)
        token = paths.token_path(live_home).read_text().strip()
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx2.AsyncClient(headers=headers) as http:
            async with Client(streamable_http_client(info["http_url"], http_client=http)) as client:
                assert await names(client) == {s.name for s in SPECS.values() if s.read_only}
        async with Client(plugin(live_home)) as local:
            assert await names(local) == set(SPECS)
    finally:
        daemon.stop(live_home, timeout=15)
        if server.poll() is None:
            server.kill()
