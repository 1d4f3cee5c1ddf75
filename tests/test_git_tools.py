"""The 6 repo-id git tools, the 8 project git tools and get_task_diff, over MCP on real repositories.

`world` (git_fixtures) gives project 'proj' with repos `app` (cloned from a bare `origin`; the
project's first repo), `lib` (init, no remote) and `mine` (linked, with a repo-local identity).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from .conftest import db_snapshot, fail, ok
from .git_fixtures import (  # noqa: F401  (git_env and world are fixtures)
    AUTHOR, World, assert_clear, bare_sha, commit_file, current_branch, git, git_env, porcelain, refused,
    repo_state, sha, world, git_templates,
)

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("git_env")]

PR_URL = "https://github.com/o/r/pull/7"


def feature_branch(repo: Path, name: str = "feature", file: str = "feature.txt", content: str = "new\n",
                   stay: bool = False) -> str:
    """A branch off main with one commit; returns its sha. The repo ends on main unless `stay`."""
    git(repo, "switch", "-q", "-c", name, "main")
    head = commit_file(repo, file, content, f"add {file}")
    if not stay:
        git(repo, "switch", "-q", "main")
    return head


def conflicting_branches(repo: Path) -> tuple[str, str]:
    """main and `clash` both rewrite README.md; returns (main sha, clash sha)."""
    git(repo, "switch", "-q", "-c", "clash", "main")
    clash = commit_file(repo, "README.md", "# theirs\n", "theirs")
    git(repo, "switch", "-q", "main")
    return commit_file(repo, "README.md", "# ours\n", "ours"), clash


def git_dir(repo: Path) -> Path:
    return Path(git(repo, "rev-parse", "--absolute-git-dir"))


async def events_of(client, kind: str) -> list[dict]:
    return (await ok(client, "get_recent_events", event_type=kind, limit=50))["events"]


# -- git_commit / commit_changes ------------------------------------------------------------------

async def test_git_commit_stages_everything_and_commits(client, world: World):
    (world.app / "README.md").write_text("# changed\n")
    (world.app / "docs").mkdir()
    (world.app / "docs" / "new.md").write_text("untracked\n")
    before = sha(world.app, "HEAD")
    done = await ok(client, "git_commit", repo_id="app", message="  Update docs  ")
    assert done["committed"] is True and done["repo_id"] == "app"
    assert done["sha"] == sha(world.app, "HEAD") != before
    assert porcelain(world.app) == ""  # modified and untracked files both went in
    assert git(world.app, "log", "-1", "--format=%s") == "Update docs"
    assert git(world.app, "show", "--name-only", "--format=", "HEAD").split() == ["README.md", "docs/new.md"]
    # no identity anywhere (git_env): AgentQueue's fallback identity, not a failure
    assert git(world.app, "log", "-1", "--format=%an <%ae>") == "AgentQueue <agentqueue@localhost>"
    assert (await events_of(client, "git.committed"))[0]["payload"]["sha"] == done["sha"]


async def test_a_commit_uses_the_identity_git_has(client, world: World, tmp_path, monkeypatch):
    (world.mine / "a.txt").write_text("a\n")
    await ok(client, "git_commit", repo_id="mine", message="repo-local identity")
    assert git(world.mine, "log", "-1", "--format=%an <%ae>") == f"{AUTHOR[0]} <{AUTHOR[1]}>"
    config = tmp_path / "global.gitconfig"
    config.write_text("[user]\n\tname = Global Person\n\temail = global@example.test\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))  # honoured by git, so by AgentQueue too
    (world.app / "b.txt").write_text("b\n")
    await ok(client, "git_commit", repo_id="app", message="global identity")
    assert git(world.app, "log", "-1", "--format=%an <%ae>") == "Global Person <global@example.test>"


async def test_nothing_to_commit_is_not_an_error(client, world: World):
    head = sha(world.app, "HEAD")
    done = await ok(client, "git_commit", repo_id="app", message="nothing")
    assert done == {"repo_id": "app", "committed": False, "sha": head}
    assert sha(world.app, "HEAD") == head
    assert await events_of(client, "git.committed") == []
    again = await ok(client, "commit_changes", project_id="proj", message="still nothing")
    assert (again["committed"], again["sha"]) == (False, head)


async def test_git_commit_refuses_an_empty_message_and_commits_nothing(client, services, world: World):
    (world.app / "README.md").write_text("# changed\n")
    state = repo_state(world.app)
    for message in ("", "   \n"):
        await refused(client, services, "git_commit", "message", "empty", repo_id="app", message=message)
        await refused(client, services, "commit_changes", "message", "empty", project_id="proj", message=message)
    assert repo_state(world.app) == state  # nothing staged, nothing committed
    assert (world.app / "README.md").read_text() == "# changed\n"


async def test_git_commit_unknown_or_missing_repo(client, services, world: World):
    await refused(client, services, "git_commit", "'ghost' not found", "list_repos", repo_id="ghost", message="m")
    shutil.rmtree(world.lib)
    await refused(client, services, "git_commit", "'lib'", "missing on disk", repo_id="lib", message="m")


async def test_commit_changes_acts_on_the_first_repo_or_the_one_given(client, services, world: World):
    (world.app / "x.txt").write_text("x\n")
    (world.lib / "y.txt").write_text("y\n")
    first = await ok(client, "commit_changes", project_id="proj", message="first repo")
    assert (first["repo_id"], first["committed"], first["sha"]) == ("app", True, sha(world.app, "HEAD"))
    assert porcelain(world.lib) == "?? y.txt"  # untouched
    await ok(client, "set_active_project", project_id="proj")
    named = await ok(client, "commit_changes", repo_id="lib", message="lib")
    assert (named["repo_id"], named["committed"]) == ("lib", True) and porcelain(world.lib) == ""

    await ok(client, "create_project", name="Empty")
    await refused(client, services, "commit_changes", "'empty' has no repos", "add_repo",
                  project_id="empty", message="m")
    await refused(client, services, "commit_changes", "'app' belongs to project 'proj'",
                  project_id="empty", repo_id="app", message="m")
    await refused(client, services, "commit_changes", "'ghost' not found", project_id="proj", repo_id="ghost",
                  message="m")


# -- git_push / push_branch -----------------------------------------------------------------------

async def test_git_push_sends_the_branch_to_origin(client, world: World):
    head = feature_branch(world.app)
    assert bare_sha(world.origin, "refs/heads/feature") is None
    done = await ok(client, "git_push", repo_id="app", branch="feature")
    assert done == {"repo_id": "app", "pushed": True, "branch": "feature"}
    assert bare_sha(world.origin, "refs/heads/feature") == head
    assert git(world.app, "rev-parse", "--abbrev-ref", "feature@{upstream}") == "origin/feature"
    assert (await events_of(client, "git.pushed"))[0]["payload"]["branch"] == "feature"


async def test_git_push_defaults_to_the_current_branch(client, world: World):
    head = commit_file(world.app, "more.txt", "more\n")
    assert (await ok(client, "git_push", repo_id="app"))["branch"] == "main"
    assert bare_sha(world.origin, "refs/heads/main") == head


async def test_push_branch_by_project(client, world: World):
    head = feature_branch(world.app, "topic", stay=True)
    done = await ok(client, "push_branch", project_id="proj")  # first repo, current branch
    assert (done["repo_id"], done["branch"], done["pushed"]) == ("app", "topic", True)
    assert bare_sha(world.origin, "refs/heads/topic") == head
    other = feature_branch(world.app, "second")
    await ok(client, "push_branch", project_id="proj", repo_id="app", branch_name="second")
    assert bare_sha(world.origin, "refs/heads/second") == other


async def test_push_without_a_remote_is_a_clear_error(client, services, world: World):
    await refused(client, services, "git_push", "no 'origin' remote", "git remote add", repo_id="lib")
    await refused(client, services, "push_branch", "no 'origin' remote", project_id="proj", repo_id="mine")


async def test_push_of_an_unknown_branch_is_refused(client, services, world: World):
    refs = bare_sha(world.origin, "main")
    await refused(client, services, "git_push", "No branch 'nope'", repo_id="app", branch="nope")
    await refused(client, services, "push_branch", "No branch 'nope'", project_id="proj", branch_name="nope")
    assert bare_sha(world.origin, "main") == refs and bare_sha(world.origin, "nope") is None


# -- git_create_branch / create_branch ------------------------------------------------------------

async def test_git_create_branch_from_head_keeps_uncommitted_work(client, world: World):
    (world.app / "wip.txt").write_text("work in progress\n")
    done = await ok(client, "git_create_branch", repo_id="app", branch_name="feature/login")
    assert done == {"repo_id": "app", "branch": "feature/login", "warning": None}
    assert current_branch(world.app) == "feature/login"
    assert sha(world.app, "feature/login") == sha(world.app, "main")
    assert porcelain(world.app) == "?? wip.txt"  # came along, nothing lost
    assert (await events_of(client, "git.branch_created"))[0]["payload"]["branch"] == "feature/login"


async def test_git_create_branch_from_a_base(client, world: World):
    develop = sha(world.app, "origin/develop")
    done = await ok(client, "git_create_branch", repo_id="app", branch_name="from-dev", base="origin/develop")
    assert done["branch"] == "from-dev" and current_branch(world.app) == "from-dev"
    assert sha(world.app, "HEAD") == develop != sha(world.app, "main")


async def test_git_create_branch_refusals(client, services, world: World):
    feature_branch(world.app)
    state = repo_state(world.app)
    await refused(client, services, "git_create_branch", "'feature' already exists", "checkout_branch",
                  repo_id="app", branch_name="feature")
    await refused(client, services, "git_create_branch", "No base branch 'nope'",
                  repo_id="app", branch_name="new", base="nope")
    assert repo_state(world.app) == state
    (world.app / "README.md").write_text("# uncommitted\n")
    (world.app / "scratch.txt").write_text("mine\n")
    state = repo_state(world.app)
    await refused(client, services, "git_create_branch", "uncommitted changes", "README.md", "scratch.txt",
                  repo_id="app", branch_name="new", base="feature")
    assert repo_state(world.app) == state and sha(world.app, "refs/heads/new") is None
    assert (world.app / "README.md").read_text() == "# uncommitted\n"
    assert (world.app / "scratch.txt").read_text() == "mine\n"


async def test_create_branch_by_project(client, services, world: World):
    done = await ok(client, "create_branch", project_id="proj", branch_name="fix-1")
    assert (done["repo_id"], done["branch"], done["warning"]) == ("app", "fix-1", None)
    assert current_branch(world.app) == "fix-1"
    done = await ok(client, "create_branch", project_id="proj", repo_id="lib", branch_name="fix-1")
    assert done["repo_id"] == "lib" and current_branch(world.lib) == "fix-1"
    await refused(client, services, "create_branch", "'fix-1' already exists", project_id="proj",
                  branch_name="fix-1")


# -- checkout_branch ------------------------------------------------------------------------------

async def test_checkout_branch_switches(client, world: World):
    head = feature_branch(world.app)
    done = await ok(client, "checkout_branch", project_id="proj", branch_name="feature")
    assert done == {"repo_id": "app", "branch": "feature", "warning": None}
    assert current_branch(world.app) == "feature" and sha(world.app, "HEAD") == head
    back = await ok(client, "checkout_branch", project_id="proj", repo_id="app", branch_name="main")
    assert back["branch"] == "main" and current_branch(world.app) == "main"


async def test_checkout_branch_unknown_or_not_local(client, services, world: World):
    state = repo_state(world.app)
    await refused(client, services, "checkout_branch", "No branch 'nope'", "get_git_status",
                  project_id="proj", branch_name="nope")
    await refused(client, services, "checkout_branch", "'origin/develop' is not a local branch", "create_branch",
                  project_id="proj", branch_name="origin/develop")
    assert repo_state(world.app) == state


async def test_checkout_branch_refuses_over_uncommitted_changes(client, services, world: World):
    feature_branch(world.app)
    (world.app / "README.md").write_text("# half done\n")
    (world.app / "notes.txt").write_text("ideas\n")
    state = repo_state(world.app)
    text = await refused(client, services, "checkout_branch", "uncommitted changes", "README.md", "notes.txt",
                         "commit_changes", project_id="proj", branch_name="feature")
    assert "switch to 'feature'" in text
    assert repo_state(world.app) == state and current_branch(world.app) == "main"
    assert (world.app / "README.md").read_text() == "# half done\n"
    assert (world.app / "notes.txt").read_text() == "ideas\n"


async def test_checkout_branch_warns_when_a_task_runs_on_the_repo(client, world: World):
    feature_branch(world.app)
    other = await ok(client, "create_task", project_id="proj", title="elsewhere", description="d", repo_id="lib")
    await ok(client, "set_task_status", task_id=other["id"], status="IN_PROGRESS")
    quiet = await ok(client, "checkout_branch", project_id="proj", repo_id="app", branch_name="feature")
    assert quiet["warning"] is None  # a task on another repo does not count

    task = await ok(client, "create_task", project_id="proj", title="busy", description="d", repo_id="app")
    await ok(client, "set_task_status", task_id=task["id"], status="IN_PROGRESS")
    done = await ok(client, "checkout_branch", project_id="proj", repo_id="app", branch_name="main")
    assert done["branch"] == "main" and current_branch(world.app) == "main"
    assert done["warning"] and task["id"] in done["warning"] and "'app'" in done["warning"]
    created = await ok(client, "create_branch", project_id="proj", branch_name="while-busy")
    assert created["warning"] and task["id"] in created["warning"]

    await ok(client, "set_task_status", task_id=task["id"], status="COMPLETED")
    assert (await ok(client, "checkout_branch", project_id="proj", branch_name="main"))["warning"] is None


# -- git_merge / merge_branch ---------------------------------------------------------------------

async def test_git_merge_clean(client, world: World):
    head = feature_branch(world.app, stay=True)  # the user is on 'feature'
    done = await ok(client, "git_merge", repo_id="app", branch_name="feature")
    assert (done["merged"], done["into"], done["conflicts"]) == (True, "main", [])
    assert done["sha"] == sha(world.app, "main")
    git(world.app, "merge-base", "--is-ancestor", head, "main")  # the commit is on the target
    assert (world.app / "feature.txt").exists()
    assert current_branch(world.app) == "feature"  # back where the user was
    assert porcelain(world.app) == "" and not (git_dir(world.app) / "MERGE_HEAD").exists()
    assert (await events_of(client, "git.merged"))[0]["payload"]["into"] == "main"


async def test_git_merge_into_another_branch(client, world: World):
    git(world.app, "branch", "release", "main")
    head = feature_branch(world.app)
    main = sha(world.app, "main")
    done = await ok(client, "git_merge", repo_id="app", branch_name="feature", into="release")
    assert (done["merged"], done["into"]) == (True, "release")
    git(world.app, "merge-base", "--is-ancestor", head, "release")
    assert sha(world.app, "main") == main and current_branch(world.app) == "main"


async def test_a_conflicting_merge_is_aborted_and_the_repo_left_clean(client, world: World):
    main, _ = conflicting_branches(world.app)
    git(world.app, "switch", "-q", "-c", "elsewhere", "main")  # the user's own branch
    done = await ok(client, "git_merge", repo_id="app", branch_name="clash")
    assert (done["merged"], done["into"], done["conflicts"]) == (False, "main", ["README.md"])
    assert "aborted" in done["message"]
    assert not (git_dir(world.app) / "MERGE_HEAD").exists()
    assert porcelain(world.app) == ""
    assert sha(world.app, "main") == main  # target unchanged
    assert current_branch(world.app) == "elsewhere"  # the user's branch checked out again
    assert (world.app / "README.md").read_text() == "# ours\n"
    event = (await events_of(client, "merge.conflict"))[0]
    assert event["payload"]["conflicts"] == ["README.md"] and event["payload"]["repo_id"] == "app"
    assert event["project_id"] == "proj"


async def test_merge_branch_by_project_clean_and_conflicting(client, world: World):
    head = feature_branch(world.app)
    done = await ok(client, "merge_branch", project_id="proj", branch_name="feature")
    assert (done["repo_id"], done["merged"], done["into"]) == ("app", True, "main")
    git(world.app, "merge-base", "--is-ancestor", head, "main")

    git(world.mine, "switch", "-q", "-c", "clash", "main")
    commit_file(world.mine, "app.py", "print('theirs')\n")
    git(world.mine, "switch", "-q", "main")
    main = commit_file(world.mine, "app.py", "print('ours')\n")
    done = await ok(client, "merge_branch", project_id="proj", repo_id="mine", branch_name="clash")
    assert (done["repo_id"], done["merged"], done["conflicts"]) == ("mine", False, ["app.py"])
    assert sha(world.mine, "main") == main and porcelain(world.mine) == "" and current_branch(world.mine) == "main"
    assert not (git_dir(world.mine) / "MERGE_HEAD").exists()


async def test_merge_refusals(client, services, world: World):
    feature_branch(world.app)
    state = repo_state(world.app)
    await refused(client, services, "git_merge", "No branch 'nope'", repo_id="app", branch_name="nope")
    await refused(client, services, "git_merge", "No target branch 'nope'", repo_id="app", branch_name="feature",
                  into="nope")
    await refused(client, services, "merge_branch", "No branch 'nope'", project_id="proj", branch_name="nope")
    assert repo_state(world.app) == state
    (world.app / "app.py").write_text("print('unsaved')\n")
    state = repo_state(world.app)
    await refused(client, services, "git_merge", "uncommitted changes", "app.py", repo_id="app",
                  branch_name="feature")
    await refused(client, services, "merge_branch", "uncommitted changes", project_id="proj", branch_name="feature")
    assert repo_state(world.app) == state
    assert (world.app / "app.py").read_text() == "print('unsaved')\n"


# -- git_create_pr --------------------------------------------------------------------------------

def fake_gh(directory: Path, record: Path, exit_code: int = 0) -> Path:
    """An executable `gh` that writes its argv (NUL-separated) to `record` and prints a PR URL."""
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "gh"
    output = (f"echo 'Creating pull request...'\necho {PR_URL}" if exit_code == 0
              else "echo 'HTTP 401: Bad credentials' >&2")
    script.write_text(f"#!/bin/sh\nprintf '%s\\0' \"$@\" > '{record}'\n{output}\nexit {exit_code}\n")
    script.chmod(0o755)
    return script


def recorded(record: Path) -> list[str]:
    return record.read_text().split("\0")[:-1]


@pytest.fixture
def gh_on_path(tmp_path, monkeypatch) -> Path:
    record = tmp_path / "gh-args"
    fake_gh(tmp_path / "fake-bin", record)
    monkeypatch.setenv("PATH", f"{tmp_path / 'fake-bin'}{os.pathsep}{os.environ['PATH']}")
    return record


async def test_git_create_pr_pushes_and_calls_gh(client, world: World, gh_on_path):
    head = feature_branch(world.app)
    done = await ok(client, "git_create_pr", repo_id="app", title="Add the feature", body="Why and how.",
                    branch="feature")
    assert done == {"repo_id": "app", "pr_url": PR_URL}
    args = recorded(gh_on_path)
    assert args[:2] == ["pr", "create"]
    for flag, value in (("--title", "Add the feature"), ("--body", "Why and how."), ("--base", "main"),
                        ("--head", "feature")):
        assert args[args.index(flag) + 1] == value, args
    assert bare_sha(world.origin, "refs/heads/feature") == head  # pushed first
    event = (await events_of(client, "pr.created"))[0]
    assert event["payload"]["pr_url"] == PR_URL


async def test_git_create_pr_defaults_and_agentqueue_gh_bin(client, world: World, tmp_path, monkeypatch):
    record = tmp_path / "args"
    script = fake_gh(tmp_path / "not-on-path", record)
    monkeypatch.setenv("AGENTQUEUE_GH_BIN", str(script))
    git(world.app, "branch", "release", "main")
    feature_branch(world.app, stay=True)
    done = await ok(client, "git_create_pr", repo_id="app", title="T", base="release")  # branch: current
    assert done["pr_url"] == PR_URL
    args = recorded(record)
    assert args[args.index("--head") + 1] == "feature" and args[args.index("--base") + 1] == "release"
    assert args[args.index("--body") + 1] == "T"  # body defaults to the title


async def test_git_create_pr_without_gh(client, services, world: World, tmp_path, monkeypatch):
    only_git = tmp_path / "only-git"
    only_git.mkdir()
    (only_git / "git").symlink_to(shutil.which("git"))
    monkeypatch.setenv("PATH", str(only_git))
    feature_branch(world.app)
    await refused(client, services, "git_create_pr", "`gh`", "not installed", "AGENTQUEUE_GH_BIN",
                  repo_id="app", title="T", branch="feature")
    assert bare_sha(world.origin, "refs/heads/feature") is None  # nothing pushed


async def test_git_create_pr_refusals(client, services, world: World, gh_on_path):
    await refused(client, services, "git_create_pr", "no 'origin' remote", "pull request",
                  repo_id="lib", title="T", branch="main")
    feature_branch(world.app)
    await refused(client, services, "git_create_pr", "title", "empty", repo_id="app", title=" ", branch="feature")
    await refused(client, services, "git_create_pr", "both 'main'", repo_id="app", title="T", branch="main")
    await refused(client, services, "git_create_pr", "No base branch 'nope'", repo_id="app", title="T",
                  branch="feature", base="nope")
    await refused(client, services, "git_create_pr", "No branch 'ghost'", repo_id="app", title="T", branch="ghost")
    assert not gh_on_path.exists()  # gh was never run
    assert bare_sha(world.origin, "refs/heads/feature") is None


async def test_git_create_pr_reports_a_failing_gh(client, services, world: World, tmp_path, monkeypatch):
    record = tmp_path / "args"
    monkeypatch.setenv("AGENTQUEUE_GH_BIN", str(fake_gh(tmp_path / "bin", record, exit_code=1)))
    feature_branch(world.app)
    await refused(client, services, "git_create_pr", "gh pr create failed", "Bad credentials", "gh auth status",
                  repo_id="app", title="T", branch="feature")
    assert recorded(record)[:2] == ["pr", "create"]


# -- git_changed_files ----------------------------------------------------------------------------

async def test_git_changed_files_committed_uncommitted_and_untracked(client, world: World):
    feature_branch(world.app, stay=True)  # committed: feature.txt (added)
    (world.app / "README.md").write_text("# edited\n")  # uncommitted
    (world.app / "app.py").unlink()  # uncommitted deletion
    (world.app / "scratch.txt").write_text("new\n")  # untracked
    done = await ok(client, "git_changed_files", repo_id="app")
    assert done["base"] == "main" and done["count"] == 4
    assert done["files"] == [{"path": "README.md", "status": "M"}, {"path": "app.py", "status": "D"},
                             {"path": "feature.txt", "status": "A"}, {"path": "scratch.txt", "status": "?"}]
    against_dev = await ok(client, "git_changed_files", repo_id="app", base_branch="origin/develop")
    assert against_dev["base"] == "origin/develop"
    assert {f["path"] for f in against_dev["files"]} == {"README.md", "app.py", "feature.txt", "scratch.txt"}


async def test_git_changed_files_of_a_clean_branch_and_refusals(client, services, world: World):
    assert await ok(client, "git_changed_files", repo_id="app") == {"repo_id": "app", "base": "main", "files": [],
                                                                     "count": 0}
    await refused(client, services, "git_changed_files", "No base branch 'nope'", repo_id="app", base_branch="nope")
    await refused(client, services, "git_changed_files", "'ghost' not found", repo_id="ghost")


# -- get_git_status -------------------------------------------------------------------------------

async def test_get_git_status_covers_every_repo_even_a_missing_one(client, world: World):
    (world.app / "README.md").write_text("# edited\n")
    (world.app / "new.txt").write_text("n\n")
    feature_branch(world.mine, stay=True)
    shutil.rmtree(world.lib)  # deleted behind AgentQueue's back
    status = await ok(client, "get_git_status", project_id="proj")
    assert status["project_id"] == "proj"
    by_id = {r["repo_id"]: r for r in status["repos"]}
    assert list(by_id) == ["app", "lib", "mine"]

    app = by_id["app"]
    assert (app["path"], app["branch"], app["clean"]) == (str(world.app), "main", False)
    assert {(c["path"], c["status"]) for c in app["changes"]} == {("README.md", "M"), ("new.txt", "??")}
    assert len(app["recent_commits"]) == 2 and "add app.py" in app["recent_commits"][0]

    lib = by_id["lib"]
    assert "missing on disk" in lib["error"] and str(world.lib) in lib["error"]
    assert lib["clean"] is None and lib["changes"] == []

    mine = by_id["mine"]
    assert (mine["branch"], mine["clean"], mine["changes"]) == ("feature", True, [])
    assert "add feature.txt" in mine["recent_commits"][0]


async def test_get_git_status_of_a_repo_that_is_no_longer_git_and_an_empty_project(client, world: World):
    shutil.rmtree(world.mine / ".git")
    mine = {r["repo_id"]: r for r in (await ok(client, "get_git_status", project_id="proj"))["repos"]}["mine"]
    assert "not a git repository" in mine["error"]
    await ok(client, "create_project", name="Empty")
    assert (await ok(client, "get_git_status", project_id="empty"))["repos"] == []
    await ok(client, "set_active_project", project_id="proj")
    assert len((await ok(client, "get_git_status"))["repos"]) == 3
    text = await fail(client, "get_git_status", project_id="nope")
    assert_clear(text, "get_git_status", "'nope' not found")


# -- git_log --------------------------------------------------------------------------------------

async def test_git_log_every_repo_or_one(client, services, world: World):
    logs = await ok(client, "git_log", project_id="proj")
    by_id = {r["repo_id"]: r for r in logs["repos"]}
    assert list(by_id) == ["app", "lib", "mine"]
    assert [c["message"] for c in by_id["app"]["commits"]] == ["add app.py", "add README.md"]
    assert [c["message"] for c in by_id["lib"]["commits"]] == ["Initial commit"]
    first = by_id["mine"]["commits"][0]
    assert set(first) == {"sha", "author", "date", "message"}
    assert (first["sha"], first["author"]) == (sha(world.mine, "HEAD"), AUTHOR[0])
    assert by_id["mine"]["branch"] == "main"

    one = await ok(client, "git_log", project_id="proj", repo_id="app", count=1)
    assert [r["repo_id"] for r in one["repos"]] == ["app"]
    assert [c["sha"] for c in one["repos"][0]["commits"]] == [sha(world.app, "HEAD")]

    shutil.rmtree(world.lib)
    again = {r["repo_id"]: r for r in (await ok(client, "git_log", project_id="proj"))["repos"]}
    assert "missing on disk" in again["lib"]["error"] and again["app"]["commits"]
    await refused(client, services, "git_log", "'lib'", "missing on disk", project_id="proj", repo_id="lib")
    await refused(client, services, "git_log", "count", project_id="proj", count=0)


# -- git_diff -------------------------------------------------------------------------------------

async def test_git_diff_uncommitted_and_against_a_base(client, services, world: World):
    (world.app / "README.md").write_text("# demo\nmore text\n")
    diffs = {r["repo_id"]: r for r in (await ok(client, "git_diff", project_id="proj"))["repos"]}
    assert list(diffs) == ["app", "lib", "mine"]
    assert "+more text" in diffs["app"]["diff"] and "README.md" in diffs["app"]["diff"]
    assert diffs["lib"]["diff"] == "" and diffs["mine"]["diff"] == ""

    git(world.app, "commit", "-q", "-am", "wip")  # clean again
    feature_branch(world.app, stay=True)
    assert (await ok(client, "git_diff", project_id="proj", repo_id="app"))["repos"][0]["diff"] == ""
    based = (await ok(client, "git_diff", project_id="proj", repo_id="app", base_branch="origin/main"))["repos"]
    assert [r["repo_id"] for r in based] == ["app"] and based[0]["base"] == "origin/main"
    assert "+more text" in based[0]["diff"] and "+new" in based[0]["diff"] and "feature.txt" in based[0]["diff"]

    await refused(client, services, "git_diff", "No base branch 'nope'", project_id="proj", repo_id="app",
                  base_branch="nope")
    await refused(client, services, "git_diff", "'ghost' not found", project_id="proj", repo_id="ghost")


# -- get_task_diff --------------------------------------------------------------------------------

def set_branch(services, task_id: str, branch: str) -> None:
    with services.store.transaction() as db:
        db["tasks"].update(task_id, {"branch": branch})


async def test_get_task_diff_of_a_task_branch(client, services, world: World):
    feature_branch(world.app, "t1/add-feature", file="src/feature.py", content="x = 1\n")
    git(world.app, "switch", "-q", "t1/add-feature")
    commit_file(world.app, "README.md", "# demo\nfeature docs\n")
    git(world.app, "switch", "-q", "main")
    (world.app / "uncommitted.txt").write_text("not part of the task\n")
    task = await ok(client, "create_task", project_id="proj", title="feature", description="d", repo_id="app")
    set_branch(services, task["id"], "t1/add-feature")
    diff = await ok(client, "get_task_diff", task_id=task["id"])
    assert (diff["task_id"], diff["branch"], diff["base"]) == (task["id"], "t1/add-feature", "main")
    assert diff["files_changed"] == ["README.md", "src/feature.py"]
    assert "+x = 1" in diff["diff"] and "+feature docs" in diff["diff"] and "uncommitted" not in diff["diff"]


async def test_get_task_diff_refusals(client, services, world: World):
    task = await ok(client, "create_task", project_id="proj", title="t", description="d", repo_id="app")
    await refused(client, services, "get_task_diff", task["id"], "no branch", task_id=task["id"])
    set_branch(services, task["id"], "gone/branch")
    await refused(client, services, "get_task_diff", "No branch 'gone/branch'", task_id=task["id"])
    await ok(client, "create_project", name="Bare")  # no repos: its tasks run in its workspace
    no_repo = await ok(client, "create_task", project_id="bare", title="t2", description="d")
    set_branch(services, no_repo["id"], "x/y")
    await refused(client, services, "get_task_diff", "without a repo", task_id=no_repo["id"])
    before = db_snapshot(services)
    await fail(client, "get_task_diff", task_id="ghost-task")
    assert db_snapshot(services) == before
