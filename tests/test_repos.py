"""add_repo (clone, link, init) and list_repos over MCP, on real temporary git repositories."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import fail, ok
from .git_fixtures import (  # noqa: F401  (git_env is a fixture)
    bare_sha, current_branch, git, git_env, make_origin, make_repo, refused, sha,
)

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("git_env")]

REPO_KEYS = {"id", "project_id", "source_type", "url", "source_path", "default_branch", "checkout_path"}


@pytest.fixture
async def project(client) -> Path:
    """Project 'proj'; returns its workspace."""
    created = await ok(client, "create_project", name="Proj")
    return Path(created["workspace"])


# -- clone --------------------------------------------------------------------------------------

async def test_clone_from_a_local_bare_repo(client, project, tmp_path):
    origin = make_origin(tmp_path / "origin.git")
    repo = await ok(client, "add_repo", source="clone", project_id="proj", url=str(origin), name="App")
    assert REPO_KEYS <= repo.keys()
    assert (repo["id"], repo["project_id"], repo["source_type"]) == ("app", "proj", "clone")
    assert repo["url"] == str(origin) and repo["source_path"] is None
    assert repo["default_branch"] == "main"  # detected from origin's HEAD
    checkout = Path(repo["checkout_path"])
    assert checkout == project / "repos" / "app"  # under the project's workspace
    assert (checkout / "README.md").read_text() == "# demo\n"
    assert sha(checkout, "HEAD") == bare_sha(origin, "main")
    assert git(checkout, "remote", "get-url", "origin") == str(origin)
    listed = await ok(client, "list_repos", project_id="proj")
    assert listed["total"] == 1 and listed["repos"] == [repo]
    events = (await ok(client, "get_recent_events", event_type="repo.added"))["events"]
    assert events and events[0]["payload"]["repo_id"] == "app"


@pytest.mark.both_eras
async def test_a_clone_reports_progress_to_a_client_that_asks_for_it(client, project, tmp_path):
    seed = make_repo(tmp_path / "seed")
    for n in range(40):  # enough objects for git to report counting/receiving
        (seed / f"f{n}.txt").write_text(f"{n}\n" * 2000)
    git(seed, "add", "-A")
    git(seed, "commit", "-q", "-m", "many files")
    origin = tmp_path / "origin.git"
    git(tmp_path, "clone", "-q", "--bare", str(seed), str(origin))
    heard: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        heard.append((progress, total, message))

    result = await client.call_tool("add_repo", {"source": "clone", "project_id": "proj", "url": origin.as_uri(),
                                                 "name": "big"}, progress_callback=on_progress)
    assert not result.is_error, result.content[0].text
    assert heard and all(message and message.startswith("git clone") for _, _, message in heard), heard
    assert heard[-1][1] == 100.0


async def test_clone_from_a_local_checkout_detects_its_default_branch(client, project, tmp_path):
    source = make_repo(tmp_path / "upstream-code", branch="trunk")
    repo = await ok(client, "add_repo", source="clone", project_id="proj", url=str(source))
    assert repo["id"] == "upstream-code"  # the name comes from the url
    assert repo["default_branch"] == "trunk"
    checkout = Path(repo["checkout_path"])
    assert current_branch(checkout) == "trunk"
    assert sha(checkout, "HEAD") == sha(source, "trunk")


async def test_clone_with_a_default_branch_that_exists_on_the_remote(client, project, tmp_path):
    origin = make_origin(tmp_path / "origin.git", extra_branches={"develop": {"dev.txt": "dev\n"}})
    repo = await ok(client, "add_repo", source="clone", project_id="proj", url=str(origin), default_branch="develop")
    assert repo["default_branch"] == "develop"
    checkout = Path(repo["checkout_path"])
    assert sha(checkout, "refs/heads/develop") == bare_sha(origin, "develop")  # a local branch to merge into


async def test_clone_with_an_unknown_default_branch_leaves_nothing_behind(client, services, project, tmp_path):
    origin = make_origin(tmp_path / "origin.git")
    await refused(client, services, "add_repo", "no branch 'nope'", "default_branch",
                  source="clone", project_id="proj", url=str(origin), name="app", default_branch="nope")
    assert not (project / "repos" / "app").exists()  # no half clone
    assert (await ok(client, "list_repos", project_id="proj"))["repos"] == []
    # and the same name can be used afterwards
    assert (await ok(client, "add_repo", source="clone", project_id="proj", url=str(origin), name="app"))["id"] == "app"


async def test_a_failed_clone_leaves_no_row_and_no_directory(client, services, project, tmp_path):
    not_a_repo = tmp_path / "plain"
    not_a_repo.mkdir()
    (not_a_repo / "file.txt").write_text("x")
    await refused(client, services, "add_repo", "clone", str(not_a_repo),
                  source="clone", project_id="proj", url=str(not_a_repo), name="plain")
    assert not (project / "repos" / "plain").exists()
    await refused(client, services, "add_repo", "clone", source="clone", project_id="proj",
                  url=str(tmp_path / "does-not-exist.git"), name="ghost")
    assert not (project / "repos" / "ghost").exists()


async def test_clone_into_a_non_empty_target_is_refused(client, services, project, tmp_path):
    origin = make_origin(tmp_path / "origin.git")
    target = project / "repos" / "app"
    target.mkdir(parents=True)
    (target / "precious.txt").write_text("keep me")
    await refused(client, services, "add_repo", str(target), "not empty",
                  source="clone", project_id="proj", url=str(origin), name="app")
    assert (target / "precious.txt").read_text() == "keep me"
    assert sorted(p.name for p in target.iterdir()) == ["precious.txt"]


async def test_clone_needs_a_url(client, services, project):
    await refused(client, services, "add_repo", "url", source="clone", project_id="proj")
    await refused(client, services, "add_repo", "url", source="clone", project_id="proj", url="  ")


# -- link ---------------------------------------------------------------------------------------

async def test_link_an_existing_checkout(client, project, tmp_path):
    mine = make_repo(tmp_path / "my-project")
    head = sha(mine, "HEAD")
    repo = await ok(client, "add_repo", source="link", project_id="proj", path=str(mine))
    assert (repo["id"], repo["source_type"]) == ("my-project", "link")
    assert repo["source_path"] == str(mine) and repo["checkout_path"] == str(mine)  # used in place
    assert repo["default_branch"] == "main" and repo["url"] is None
    assert sha(mine, "HEAD") == head and current_branch(mine) == "main"  # untouched


async def test_link_records_the_remote_and_its_default_branch(client, project, tmp_path):
    origin = make_origin(tmp_path / "origin.git")
    checkout = tmp_path / "work"
    git(tmp_path, "clone", "-q", str(origin), str(checkout))
    git(checkout, "switch", "-q", "-c", "topic")  # the user is on a feature branch right now
    repo = await ok(client, "add_repo", source="link", project_id="proj", path=str(checkout), name="work")
    assert repo["url"] == str(origin)
    assert repo["default_branch"] == "main"  # origin's HEAD, not whatever is checked out
    assert current_branch(checkout) == "topic"


async def test_link_refuses_what_is_not_a_checkout(client, services, project, tmp_path):
    repo = make_repo(tmp_path / "repo")
    (repo / "src").mkdir()
    plain = tmp_path / "plain"
    plain.mkdir()
    cases = [
        ({"path": str(tmp_path / "nowhere")}, ["nowhere", "does not exist"]),
        ({"path": str(plain)}, [str(plain), "not a git repository"]),
        ({"path": str(repo / "src")}, ["inside the repository", str(repo), "root"]),  # a subdirectory
        ({"path": "repo"}, ["path", "absolute"]),  # relative
        ({"path": str(repo / "README.md")}, ["README.md", "not a directory"]),
        ({}, ["path"]),
    ]
    for args, needles in cases:
        await refused(client, services, "add_repo", *needles, source="link", project_id="proj", **args)
    assert (await ok(client, "list_repos", project_id="proj"))["repos"] == []


async def test_link_with_an_unknown_default_branch_is_refused_and_the_checkout_kept(client, services, project,
                                                                                     tmp_path):
    mine = make_repo(tmp_path / "mine")
    await refused(client, services, "add_repo", "no branch 'release'",
                  source="link", project_id="proj", path=str(mine), default_branch="release")
    assert (mine / "README.md").exists() and sha(mine, "HEAD")  # the user's checkout is never removed


# -- init ---------------------------------------------------------------------------------------

async def test_init_creates_a_repo_with_an_initial_commit(client, project):
    repo = await ok(client, "add_repo", source="init", project_id="proj", name="Fresh Start")
    assert (repo["id"], repo["source_type"], repo["default_branch"]) == ("fresh-start", "init", "main")
    assert repo["url"] is None
    checkout = Path(repo["checkout_path"])
    assert checkout == project / "repos" / "fresh-start"
    assert current_branch(checkout) == "main"
    assert git(checkout, "rev-list", "--count", "HEAD") == "1"
    assert git(checkout, "log", "-1", "--format=%s") == "Initial commit"


async def test_init_honours_default_branch(client, project):
    repo = await ok(client, "add_repo", source="init", project_id="proj", name="svc", default_branch="trunk")
    checkout = Path(repo["checkout_path"])
    assert repo["default_branch"] == "trunk"
    assert current_branch(checkout) == "trunk"
    assert sha(checkout, "refs/heads/trunk") and not sha(checkout, "refs/heads/main")


async def test_init_without_a_name_uses_the_project(client, project):
    repo = await ok(client, "add_repo", source="init", project_id="proj")
    assert repo["id"] == "proj-repo"


async def test_init_at_a_path_that_is_taken_is_refused(client, services, project, tmp_path):
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    await refused(client, services, "add_repo", str(busy), "not empty",
                  source="init", project_id="proj", path=str(busy))
    assert (busy / "notes.txt").read_text() == "mine" and not (busy / ".git").exists()
    a_file = tmp_path / "a-file"
    a_file.write_text("data")
    await refused(client, services, "add_repo", str(a_file), source="init", project_id="proj", path=str(a_file))
    assert a_file.read_text() == "data"


async def test_init_at_an_empty_absolute_path(client, project, tmp_path):
    repo = await ok(client, "add_repo", source="init", project_id="proj", path=str(tmp_path / "new" / "svc"))
    assert repo["checkout_path"] == str(tmp_path / "new" / "svc")
    assert sha(tmp_path / "new" / "svc", "HEAD")


# -- ids, projects, listing ---------------------------------------------------------------------

async def test_a_duplicate_repo_id_is_refused(client, services, project, tmp_path):
    await ok(client, "add_repo", source="init", project_id="proj", name="core")
    other = make_repo(tmp_path / "core")
    await refused(client, services, "add_repo", "'core' already exists", "name",
                  source="link", project_id="proj", path=str(other))
    await ok(client, "create_project", name="Other")
    await refused(client, services, "add_repo", "'core' already exists",
                  source="init", project_id="other", name="Core")  # ids are global


async def test_add_repo_needs_a_project(client, services):
    await refused(client, services, "add_repo", "project_id", "set_active_project", source="init")
    await refused(client, services, "add_repo", "'nope' not found", source="init", project_id="nope")


async def test_add_repo_uses_the_active_project(client, project):
    await ok(client, "set_active_project", project_id="proj")
    assert (await ok(client, "add_repo", source="init", name="x"))["project_id"] == "proj"


async def test_list_repos_filters_by_project_or_lists_all(client, project, tmp_path):
    await ok(client, "create_project", name="Other")
    await ok(client, "add_repo", source="init", project_id="proj", name="a")
    await ok(client, "add_repo", source="link", project_id="other", path=str(make_repo(tmp_path / "b")))
    await ok(client, "add_repo", source="init", project_id="proj", name="c")

    in_proj = await ok(client, "list_repos", project_id="proj")
    assert [r["id"] for r in in_proj["repos"]] == ["a", "c"] and in_proj["total"] == 2
    assert [r["id"] for r in (await ok(client, "list_repos", project_id="other"))["repos"]] == ["b"]
    everything = await ok(client, "list_repos")  # no project given and none active: all
    assert sorted(r["id"] for r in everything["repos"]) == ["a", "b", "c"] and everything["total"] == 3
    assert all(REPO_KEYS <= r.keys() for r in everything["repos"])

    await ok(client, "set_active_project", project_id="other")
    assert [r["id"] for r in (await ok(client, "list_repos"))["repos"]] == ["b"]
    assert "'nope' not found" in await fail(client, "list_repos", project_id="nope")
