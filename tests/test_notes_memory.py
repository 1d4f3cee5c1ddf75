"""Notes (CRUD, traversal attempts, atomic writes, events, resource) and project memory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import date, timedelta
from pathlib import Path

import anyio
import pytest
from mcp import MCPError

from agentqueue.engine.orchestrator import Engine, EngineConfig
from agentqueue.services import Services

from .conftest import db_snapshot
from .slowdown import scaled

pytestmark = pytest.mark.anyio


async def call(client, tool: str, args: dict) -> dict:
    result = await client.call_tool(tool, args)
    assert not result.is_error, result.content[0].text
    return result.structured_content


async def refused(client, tool: str, args: dict) -> str:
    result = await client.call_tool(tool, args)
    assert result.is_error
    text = result.content[0].text
    assert text.split(":", 1)[-1].strip() and "Internal error" not in text
    return text


@pytest.fixture
async def notes_client(client, services: Services):
    await call(client, "create_project", {"name": "Ideas"})
    await call(client, "set_active_project", {"project_id": "ideas"})
    return client


async def test_note_crud_with_slugged_names_and_events(notes_client, services: Services) -> None:
    c = notes_client
    assert await call(c, "write_note", {"title": "API Design: v2!", "content": "# API Design: v2!\n\nREST."}) == {
        "name": "api-design-v2.md", "title": "API Design: v2!", "status": "created"}
    assert (await call(c, "write_note", {"title": "API Design: v2!", "content": "# API Design\n\nGraphQL."}))[
        "status"] == "updated"
    for handle in ("API Design: v2!", "api-design-v2", "api-design-v2.md"):
        read = await call(c, "read_note", {"title": handle})
        assert read["name"] == "api-design-v2.md" and read["title"] == "API Design" and "GraphQL" in read["content"]
    appended = await call(c, "append_note", {"title": "Open questions", "content": "- auth?"})
    assert appended["status"] == "created" and appended["name"] == "open-questions.md"
    appended = await call(c, "append_note", {"title": "open-questions.md", "content": "- rate limits?"})
    assert appended["status"] == "appended"
    text = (await call(c, "read_note", {"title": "Open questions"}))["content"]
    assert text == "# Open questions\n\n- auth?\n\n- rate limits?" and appended["size_bytes"] == len(text.encode())
    listed = await call(c, "list_notes", {})
    assert [n["name"] for n in listed["notes"]] == ["api-design-v2.md", "open-questions.md"]
    assert listed["notes"][1]["title"] == "Open questions" and listed["notes"][0]["size_bytes"] > 0
    folder = Path(services.projects.get("ideas").workspace) / "notes"
    assert sorted(p.name for p in folder.iterdir()) == ["api-design-v2.md", "open-questions.md"]  # no temp files
    assert await call(c, "delete_note", {"title": "API Design: v2!"}) == {"deleted": "api-design-v2.md"}
    await refused(c, "read_note", {"title": "API Design: v2!"})
    written = [e.payload for e in services.events.recent(20, event_type="note.written")]
    assert {"name": "open-questions.md", "status": "appended"}.items() <= written[0].items()
    assert services.events.recent(5, event_type="note.deleted")[0].payload["name"] == "api-design-v2.md"


@pytest.mark.parametrize("title", ["../../etc/passwd", "/etc/passwd", "..", "../secret.md", "notes/../../x.md",
                                   "..\\..\\win.md", "a/b.md"])
async def test_titles_cannot_escape_the_notes_folder(notes_client, services: Services, tmp_path: Path,
                                                      title: str) -> None:
    c = notes_client
    workspace = Path(services.projects.get("ideas").workspace)
    outside = workspace / "secret.md"
    outside.write_text("# Secret\n\nnot a note")
    written = await c.call_tool("write_note", {"title": title, "content": "x"})
    if not written.is_error:  # a usable title becomes a plain slug inside notes/
        name = written.structured_content["name"]
        assert "/" not in name and (workspace / "notes" / name).is_file()
    assert outside.read_text() == "# Secret\n\nnot a note"
    read = await c.call_tool("read_note", {"title": title})
    assert read.is_error or "not a note" not in read.content[0].text
    deleted = await c.call_tool("delete_note", {"title": title})
    if not deleted.is_error:  # only ever the slugged note inside notes/
        assert deleted.structured_content["deleted"] == written.structured_content["name"]
    assert outside.read_text() == "# Secret\n\nnot a note"
    assert not any(p.name == "secret.md" for p in (workspace / "notes").glob("*"))


async def test_a_symlinked_note_leading_outside_is_not_read(notes_client, services: Services, tmp_path: Path) -> None:
    folder = Path(services.projects.get("ideas").workspace) / "notes"
    folder.mkdir(parents=True, exist_ok=True)
    secret = tmp_path / "secret.md"
    secret.write_text("top secret")
    os.symlink(secret, folder / "link.md")
    text = await refused(notes_client, "read_note", {"title": "link.md"})
    assert "top secret" not in text


async def test_empty_title_and_unknown_project_are_refused(notes_client, services: Services) -> None:
    before = db_snapshot(services)
    assert "title" in await refused(notes_client, "write_note", {"title": "!!!", "content": "x"})
    assert "nope" in await refused(notes_client, "list_notes", {"project_id": "nope"})
    assert db_snapshot(services) == before


@pytest.mark.both_eras
async def test_note_resource_and_compare_specs(notes_client, services: Services, tmp_path: Path) -> None:
    c = notes_client
    await call(c, "write_note", {"title": "Plan", "content": "# Plan\n\nship it"})
    contents = await c.read_resource("agentqueue://projects/ideas/notes/plan.md")
    assert contents.contents[0].text == "# Plan\n\nship it"
    with pytest.raises(MCPError):
        await c.read_resource("agentqueue://projects/ideas/notes/missing.md")
    seed = tmp_path / "seed"
    subprocess.run(["git", "init", "-q", "-b", "main", str(seed)], check=True)
    (seed / "specs").mkdir()
    (seed / "specs" / "auth.md").write_text("# Auth spec\n")
    subprocess.run(["git", "-C", str(seed), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                    "--allow-empty", "-m", "init"], check=True)
    await call(c, "add_repo", {"source": "link", "path": str(seed)})
    compared = await call(c, "compare_specs_notes", {})
    assert compared["specs_path"] == str(seed / "specs")
    assert [s["title"] for s in compared["specs"]] == ["Auth spec"] and [n["name"] for n in compared["notes"]] == [
        "plan.md"]
    await refused(c, "compare_specs_notes", {"specs_path": "/etc"})


def test_memory_daily_notes_and_context_window(services: Services) -> None:
    services.projects.create("Mem")
    memory = services.memory
    today = date(2026, 11, 22)
    memory.long_term_path("mem").parent.mkdir(parents=True, exist_ok=True)
    memory.long_term_path("mem").write_text("Use pnpm, not npm.")
    for offset in range(4):
        day = today - timedelta(days=offset)
        path = memory.daily_path("mem", day)
        assert path.name == day.strftime("%Y%m%d") + ".md" and path.parent.name == day.strftime("%Y%m")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# {day}\n\nday {offset} work")
    text = memory.context("mem", today=today)
    assert text.startswith("## Long-term Memory\n\nUse pnpm, not npm.")
    assert "day 0 work" in text and "day 2 work" in text and "day 3 work" not in text  # the last 3 days only
    assert text.index("day 2 work") < text.index("day 0 work")  # oldest first
    capped = memory.context("mem", cap=40, today=today)
    assert len(capped) <= 40 + len("[older memory trimmed]\n") and capped.endswith("day 0 work")


async def test_completed_tasks_are_remembered_and_memory_reaches_the_agent(services: Services) -> None:
    services.projects.create("Mem")
    memory_file = services.memory.long_term_path("mem")
    memory_file.parent.mkdir(parents=True, exist_ok=True)
    memory_file.write_text("The build command is `make all`.")
    services.repos.add("mem", "init", name="repo")
    # The agent saves what it was told (prompt + context) so the test can see its context.
    agent = f"{sys.executable} -c \"import sys; open('told.txt', 'w').write(sys.stdin.read()); print('saved it')\""
    services.agents.create("recorder", "command", command=agent)
    task = services.tasks.create("mem", "Record context", "Save what you are told.", repo_id="repo")
    engine = Engine(services, services.home, config=EngineConfig(poll_seconds=0.1))
    async with anyio.create_task_group() as tg:
        tg.start_soon(engine.run)
        with anyio.fail_after(scaled(30)):
            while services.tasks.get(task.id).status != "COMPLETED":
                await anyio.sleep(0.1)
        await engine.shutdown()
        tg.cancel_scope.cancel()
    told = subprocess.run(["git", "show", "main:told.txt"], cwd=services.repos.get("repo").checkout_path,
                          capture_output=True, text=True, check=True).stdout
    assert "The build command is `make all`." in told and "Save what you are told." in told
    today = services.memory.context("mem")
    assert f'task {task.id} "Record context" completed: saved it' in today
    assert json.dumps(today)  # plain text
