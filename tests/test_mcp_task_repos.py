"""Which repo a task runs in (issue 8 item 3), over MCP: create_task without repo_id,
the project's default repo (edit_project default_repo_id), edit_task repo_id, and the refusals."""

from __future__ import annotations

import pytest

from .conftest import ok
from .git_fixtures import git_env, refused  # noqa: F401  (git_env: fixture)

pytestmark = pytest.mark.anyio


@pytest.fixture
async def project(client, git_env) -> str:
    await ok(client, "create_project", name="Proj")
    return "proj"


async def add_repo(client, name: str, project_id: str = "proj") -> dict:
    return await ok(client, "add_repo", source="init", project_id=project_id, name=name)


async def new_task(client, project_id: str = "proj", **extra) -> dict:
    return await ok(client, "create_task", project_id=project_id, title="Add a file", description="Write a.txt.",
                    **extra)


async def test_a_task_without_repo_id_runs_in_the_projects_only_repo(client, project):
    before = await new_task(client)
    assert before["repo_id"] is None and before["status"] == "READY"  # no repos: the project workspace
    await add_repo(client, "app")
    task = await new_task(client)
    assert task["repo_id"] == "app"
    assert (await ok(client, "get_task", task_id=task["id"]))["repo_id"] == "app"  # stored, not computed per read


async def test_the_default_repo_wins_and_an_explicit_repo_id_wins_over_it(client, project):
    await add_repo(client, "app")
    await add_repo(client, "lib")
    edited = await ok(client, "edit_project", project_id=project, default_repo_id="lib")
    assert edited["default_repo_id"] == "lib"
    assert (await ok(client, "list_projects"))["projects"][0]["default_repo_id"] == "lib"
    assert (await new_task(client))["repo_id"] == "lib"
    assert (await new_task(client, repo_id="app"))["repo_id"] == "app"


async def test_several_repos_and_no_default_is_refused_naming_the_choices(client, project, services):
    await add_repo(client, "app")
    await add_repo(client, "lib")
    text = await refused(client, services, "create_task", "app, lib", "repo_id",
                         "edit_project default_repo_id", project_id=project, title="t", description="d")
    assert "no default" in text


async def test_default_repo_id_must_be_one_of_the_projects_repos(client, project, services):
    await add_repo(client, "app")
    await ok(client, "create_project", name="Other")
    await add_repo(client, "elsewhere", project_id="other")
    await refused(client, services, "edit_project", "'elsewhere' belongs to project 'other'", "app",
                  project_id=project, default_repo_id="elsewhere")
    await refused(client, services, "edit_project", "'ghost' not found", "app",
                  project_id=project, default_repo_id="ghost")
    await ok(client, "create_project", name="Empty")
    await refused(client, services, "edit_project", "no repos yet", "add_repo", project_id="empty",
                  default_repo_id="app")

    assert (await ok(client, "edit_project", project_id=project, default_repo_id="app"))["default_repo_id"] == "app"
    renamed = await ok(client, "edit_project", project_id=project, name="Proj 2")  # other edits keep it
    assert renamed["default_repo_id"] == "app"
    assert (await ok(client, "edit_project", project_id=project, default_repo_id=""))["default_repo_id"] is None


async def test_deleting_the_default_repos_record_clears_the_default(client, project, services):
    await add_repo(client, "app")
    await add_repo(client, "lib")
    await ok(client, "edit_project", project_id=project, default_repo_id="lib")
    with services.store.transaction() as db:  # no tool removes one repo yet; any removal of the row must clear it
        db.execute("DELETE FROM repos WHERE id = 'lib'")
    assert (await ok(client, "list_projects"))["projects"][0]["default_repo_id"] is None
    assert (await new_task(client))["repo_id"] == "app"  # the only repo left


async def test_edit_task_moves_a_task_to_another_repo_but_not_while_it_runs(client, project, services):
    await add_repo(client, "app")
    await add_repo(client, "lib")
    await ok(client, "create_project", name="Other")
    await add_repo(client, "elsewhere", project_id="other")
    task = await new_task(client, repo_id="app")
    assert (await ok(client, "edit_task", task_id=task["id"], repo_id="lib"))["repo_id"] == "lib"
    await refused(client, services, "edit_task", "belongs to project 'other'", task_id=task["id"], repo_id="elsewhere")
    await refused(client, services, "edit_task", "'ghost' not found", task_id=task["id"], repo_id="ghost")
    await ok(client, "set_task_status", task_id=task["id"], status="IN_PROGRESS")
    await refused(client, services, "edit_task", "IN_PROGRESS", "stop_task", task_id=task["id"], repo_id="app")
    assert (await ok(client, "get_task", task_id=task["id"]))["repo_id"] == "lib"


async def test_create_task_describes_repo_id(client):
    tools = {t.name: t for t in (await client.list_tools()).tools}
    schema = tools["create_task"].input_schema["properties"]["repo_id"]
    assert "default" in schema.get("description", "") and "only repo" in schema["description"]
    assert "default_repo_id" in tools["edit_project"].input_schema["properties"]
    assert "repo_id" in tools["edit_task"].input_schema["properties"]
