"""The audit log: a row per tool call (refused and failed ones too), secrets redacted, read by tool and resource.

Also: `edit_policy` asks a person in the standard preset and is refused in readonly, `get_policy`
shows what applies, the readonly preset keeps read-only tools, and old rows are pruned.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp import Client

from agentqueue.services import Services
from agentqueue.settings import ConfigError, load

from .conftest import fail, ok

pytestmark = pytest.mark.anyio


async def test_every_call_is_a_row_with_who_what_and_how_it_ended(client, services):
    await ok(client, "create_project", name="Demo")
    await fail(client, "get_task", task_id="no-such-task")
    log = (await ok(client, "get_audit_log", limit=10))["entries"]
    # Newest first; the get_audit_log call itself is recorded after it answers, so it is not in its own result.
    assert [(e["action"], e["outcome"]) for e in log] == [("tool:get_task", "error"), ("tool:create_project", "ok")]
    failed, created = log
    assert created["actor"].startswith("client:") and created["decision"] == "allow"
    assert created["arguments"] == {"name": "Demo"}
    assert "no-such-task" in failed["message"] and failed["duration_ms"] >= 0
    only_errors = (await ok(client, "get_audit_log", action="tool:get_task"))["entries"]
    assert [e["action"] for e in only_errors] == ["tool:get_task"]


async def test_secrets_never_reach_the_log(client, services):
    await ok(client, "create_project", name="Demo")
    await client.call_tool("create_hook", {
        "name": "h", "project_id": "demo", "trigger": {"type": "periodic", "interval_seconds": 3600},
        "action": "create_task", "task_template": {"title": "t", "description": "d"},
        "context_steps": [{"type": "http", "url": "http://127.0.0.1:9/x",
                           "headers": {"Authorization": "Bearer sk-live-123", "X-Api-Key": "abc"}}]})
    raw = [(r["arguments"],) for r in services.store.all("SELECT arguments FROM audit_log")]
    dumped = json.dumps(raw)
    assert "sk-live-123" not in dumped and "abc\\" not in dumped and "[redacted]" in dumped


async def test_rows_cannot_be_rewritten_and_old_ones_are_pruned(services: Services):
    services.audit.record(actor="cli", action="tool:x", decision="allow")
    with pytest.raises(Exception, match="append-only"):
        with services.store.transaction() as db:
            db.execute("UPDATE audit_log SET decision = 'deny'")
    with services.store.transaction() as db:  # a row from 40 days ago (inserted, never rewritten)
        db.execute("INSERT INTO audit_log (time, actor, action, decision, outcome) VALUES "
                   "('2000-01-01T00:00:00.000Z', 'cli', 'tool:old', 'allow', 'ok')")
    assert services.audit.prune(30) == 1
    assert [e.action for e in services.audit.query()] == ["tool:x"]


def test_the_retention_setting_is_checked(tmp_path: Path):
    (tmp_path / "config.toml").write_text("[audit]\nretention_days = 7\n")
    assert load(tmp_path, {}).audit_retention_days == 7
    (tmp_path / "config.toml").write_text('[audit]\nretention_days = "soon"\n')
    with pytest.raises(ConfigError, match="retention_days"):
        load(tmp_path, {})


@pytest.mark.both_eras
async def test_the_audit_resource_lists_the_latest_rows(client, services):
    await ok(client, "create_project", name="Demo")
    contents = (await client.read_resource("agentqueue://audit")).contents
    entries = json.loads(contents[0].text)["entries"]
    assert entries[0]["action"] == "tool:create_project"


@pytest.mark.both_eras
async def test_edit_policy_asks_a_person_and_get_policy_shows_the_result(server, services, era):
    services.projects.create("Demo")
    mode = "legacy" if era == "legacy" else "auto"
    async with Client(server, mode=mode) as cannot_ask:  # no elicitation: a model cannot loosen the policy alone
        text = await fail(cannot_ask, "edit_policy", project_id="demo", add_rule="Bash(make deploy:*)")
        assert "cannot ask" in text
        assert "Bash(make deploy:*)" not in json.dumps(await ok(cannot_ask, "get_policy", project_id="demo"))
    asked: list[str] = []

    async def person(context, params):
        asked.append(params.message)
        from mcp.types import ElicitResult
        return ElicitResult(action="accept", content={"approve": True})

    async with Client(server, mode=mode, elicitation_callback=person) as client:
        view = await ok(client, "edit_policy", project_id="demo", add_rule="Bash(make deploy:*)")
        assert any(r["rule"] == "Bash(make deploy:*)" for r in view["allow"]), view["allow"]
        assert len(asked) == 1 and "edit_policy" in asked[0]
        shown = await ok(client, "get_policy", project_id="demo")
        assert shown["preset"] == "standard" and any(r["rule"] == "Bash(make deploy:*)" for r in shown["allow"])
        bad = await fail(client, "edit_policy", preset="lenient")
        assert "lenient" in bad and "readonly" in bad


async def test_the_readonly_preset_keeps_reads_and_refuses_the_rest(client, services):
    services.projects.create("Demo")
    services.policies.edit(preset="readonly")
    assert (await ok(client, "list_tasks", project_id="demo"))["tasks"] == []
    text = await fail(client, "create_task", project_id="demo", title="T", description="d")
    assert "denied" in text and "readonly" in text
    assert services.store.scalar("SELECT count(*) FROM tasks") == 0


@pytest.mark.both_eras
async def test_tools_the_policy_denies_outright_are_left_out_of_the_list(client, services):
    everything = {t.name for t in (await client.list_tools()).tools}
    services.policies.edit(add_rule="tool:delete_project", rule_list="deny")
    assert {t.name for t in (await client.list_tools()).tools} == everything - {"delete_project"}
    services.policies.edit(preset="readonly")
    listed = {t.name for t in (await client.list_tools()).tools}
    assert "list_tasks" in listed and "create_task" not in listed and "run_command" not in listed
    services.policies.edit(add_rule="tool:run_command:pytest:*", rule_list="allow")  # a way through: shown again
    assert "run_command" in {t.name for t in (await client.list_tools()).tools}
