"""Argument injection into git, and the workspace jail of read_file / search_files / run_command.

Every ref/branch/url argument that starts with '-' must be refused before git sees it (CVE-2025-68145
and friends) and have no effect; invalid ref names are refused. Paths are jailed to project
workspaces and registered repos by *resolved* path: absolute paths outside, '..', symlinks pointing
out and prefix tricks all fail, while relative paths, linked repos and symlinks that stay inside work.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from agentqueue.services import gitops
from agentqueue.services.errors import InvalidInputError

from .conftest import db_snapshot, fail, ok
from .git_fixtures import (  # noqa: F401  (git_env and world are fixtures)
    World, assert_clear, commit_file, git, git_env, git_templates, refused, repo_state, world,
)

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("git_env")]


# == argument injection ============================================================================

def evil_values(marker: Path) -> list[str]:
    return [f"--upload-pack=touch {marker}", "-D", f"--output={marker}", f"--exec=touch {marker}", "-"]


INVALID_REFS = ["a..b", "a b", "x~1", "a:b", "topic.lock"]

# tool -> list of (argument name, the other arguments). "$X" is replaced by the bad value.
REF_ARGUMENTS: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "git_push": [("branch", {"repo_id": "app", "branch": "$X"})],
    "push_branch": [("branch_name", {"project_id": "proj", "branch_name": "$X"})],
    "git_create_branch": [("branch_name", {"repo_id": "app", "branch_name": "$X"}),
                          ("base", {"repo_id": "app", "branch_name": "fine", "base": "$X"})],
    "create_branch": [("branch_name", {"project_id": "proj", "branch_name": "$X"})],
    "checkout_branch": [("branch_name", {"project_id": "proj", "branch_name": "$X"})],
    "git_merge": [("branch_name", {"repo_id": "app", "branch_name": "$X"}),
                  ("into", {"repo_id": "app", "branch_name": "feature", "into": "$X"})],
    "merge_branch": [("branch_name", {"project_id": "proj", "branch_name": "$X"})],
    "git_create_pr": [("branch", {"repo_id": "app", "title": "T", "branch": "$X"}),
                      ("base", {"repo_id": "app", "title": "T", "branch": "feature", "base": "$X"})],
    "git_changed_files": [("base_branch", {"repo_id": "app", "base_branch": "$X"})],
    "git_diff": [("base_branch", {"project_id": "proj", "base_branch": "$X"}),  # every repo of the project
                 ("base_branch", {"project_id": "proj", "repo_id": "app", "base_branch": "$X"})],
    "add_repo": [("default_branch", {"project_id": "proj", "source": "init", "name": "n1", "default_branch": "$X"}),
                 ("default_branch", {"project_id": "proj", "source": "clone", "url": "$ORIGIN", "name": "n2",
                                     "default_branch": "$X"}),
                 ("default_branch", {"project_id": "proj", "source": "link", "path": "$SEED",
                                     "default_branch": "$X"})],
}


REF_PARAMETERS = {"branch", "branch_name", "base", "into", "base_branch", "default_branch"}


async def test_the_table_covers_every_ref_parameter(client):
    advertised = {(tool.name, param) for tool in (await client.list_tools()).tools
                  for param in tool.input_schema.get("properties", {}) if param in REF_PARAMETERS}
    covered = {(tool, name) for tool, arguments in REF_ARGUMENTS.items() for name, _ in arguments}
    assert advertised == covered


def fill(args: dict[str, Any], value: str, world: World) -> dict[str, Any]:
    subst = {"$X": value, "$ORIGIN": str(world.origin), "$SEED": str(world.seed)}
    return {k: subst.get(v, v) if isinstance(v, str) else v for k, v in args.items()}


@pytest.fixture
def armed(world: World, tmp_path, monkeypatch) -> tuple[World, Path, Path]:
    """The world plus a 'feature' branch in app and a fake gh on PATH that records any call."""
    git(world.app, "switch", "-q", "-c", "feature")
    commit_file(world.app, "feature.txt", "f\n")
    git(world.app, "switch", "-q", "main")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    gh_record = tmp_path / "gh-called"
    (bin_dir / "gh").write_text(f"#!/bin/sh\ntouch '{gh_record}'\necho https://github.com/o/r/pull/1\n")
    (bin_dir / "gh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return world, tmp_path / "pwned", gh_record


def everything(world: World, services) -> tuple[str, ...]:
    """The database, every repo (refs, HEAD, working tree), origin's refs and the workspace's repo dirs."""
    return (db_snapshot(services), repo_state(world.app), repo_state(world.lib), repo_state(world.mine),
            repo_state(world.seed), git(world.origin, "for-each-ref"),
            str(sorted(p.name for p in (world.workspace / "repos").iterdir())))


@pytest.mark.slow
async def test_bad_refs_are_refused_and_change_nothing(client, services, armed):
    """Every ref argument of every git tool, with option-like and invalid names."""
    world, marker, gh_record = armed
    before = everything(world, services)
    problems = []
    for tool, arguments in REF_ARGUMENTS.items():
        for name, template in arguments:
            for value in evil_values(marker) + INVALID_REFS:
                result = await client.call_tool(tool, fill(template, value, world))
                text = result.content[0].text if result.content else ""
                label = f"{tool}({name}={value!r})"
                if not result.is_error:
                    problems.append(f"{label}: accepted: {result.structured_content}")
                    continue
                needles = [repr(value), "with '-'"] if value.startswith("-") else [repr(value), "not a valid git"]
                try:
                    assert_clear(text, tool, *needles)
                except AssertionError as error:
                    problems.append(f"{label}: {error}")
                if marker.exists():
                    problems.append(f"{label}: ran a command")
                    marker.unlink()
        if everything(world, services) != before:
            problems.append(f"a refused {tool} call changed the database or a repo")
            before = everything(world, services)
    assert not gh_record.exists(), "gh was run"
    assert not problems, "\n".join(problems)


async def test_a_task_branch_starting_with_a_dash_is_refused(client, services, armed):
    world, marker, _ = armed
    task = await ok(client, "create_task", project_id="proj", title="t", description="d", repo_id="app")
    for value in evil_values(marker):
        with services.store.transaction() as db:
            db["tasks"].update(task["id"], {"branch": value})
        await refused(client, services, "get_task_diff", "starting with '-'", task_id=task["id"])
        assert not marker.exists()


CLONE_URLS = ["--upload-pack=touch $M", "-u touch $M", "--template=$M", "--config=core.sshCommand=touch $M",
              "ext::sh -c touch% $M"]


async def test_clone_urls_that_are_options_or_command_transports_are_refused(client, services, armed):
    world, marker, _ = armed
    before = everything(world, services)
    for url in CLONE_URLS:
        url = url.replace("$M", str(marker))
        text = await fail(client, "add_repo", project_id="proj", source="clone", url=url, name="evil")
        assert_clear(text, "add_repo", repr(url))
        assert not marker.exists(), url
        assert not (world.workspace / "repos" / "evil").exists(), url
    assert everything(world, services) == before


async def test_a_leading_space_does_not_smuggle_an_option(client, services, armed):
    world, marker, _ = armed
    before = everything(world, services)
    await refused(client, services, "add_repo", "starts with '-'", project_id="proj", source="clone",
                  url=f"  --upload-pack=touch {marker}", name="evil")
    await refused(client, services, "git_create_branch", "starting with '-'", repo_id="app", branch_name=" -D")
    assert not marker.exists() and everything(world, services) == before


def test_check_ref_name_unit():
    for good in ("main", "feature/login", "t1/add-a-thing", "release-1.2", "v2"):
        assert gitops.check_ref_name(good) == good
    assert gitops.check_ref_name("  main ") == "main"
    for bad in ["-D", "--force", "-", "a..b", "a b", "x~1", "x^", "a:b", "a?", "a*", "a[", "a\\b", "@",
                "a@{1}", "x.lock", "end/", "end.", "a//b", "/abs", "tab\there", "nul\0", "", "   ", None]:
        with pytest.raises(InvalidInputError):
            gitops.check_ref_name(bad)


# == the jail =====================================================================================

@pytest.fixture
def jail(world: World, tmp_path) -> dict[str, Path]:
    """Files inside and outside the jail, and symlinks across it."""
    ws = world.workspace
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("TOP SECRET outside\n")
    evil = tmp_path / "mine-evil"  # the prefix trick: the linked repo is at <tmp>/mine
    evil.mkdir()
    (evil / "secret.txt").write_text("TOP SECRET prefix\n")
    (ws / "notes.txt").write_text("line 1\nTOP SECRET inside\nline 3\n")
    (ws / "sub").mkdir()
    (ws / "sub" / "deep.txt").write_text("deep\n")
    (ws / "leak.txt").symlink_to(outside / "secret.txt")  # symlinked file pointing out
    (ws / "leak-dir").symlink_to(outside)  # symlinked dir pointing out
    (world.app / "leak.txt").symlink_to(outside / "secret.txt")  # inside a repo, too
    (ws / "inside-link.txt").symlink_to(ws / "notes.txt")  # stays inside
    (ws / "inside-dir").symlink_to(world.mine)  # a dir link into a registered repo
    return {"ws": ws, "outside": outside, "secret": outside / "secret.txt", "evil": evil / "secret.txt",
            "evil_dir": evil}


def escapes(world: World, jail: dict[str, Path]) -> list[tuple[str, str]]:
    """(label, path) pairs that must all be refused; relative ones resolve against the workspace."""
    ws, secret = jail["ws"], jail["secret"]
    return [
        ("absolute outside", "/etc/passwd"),
        ("absolute outside dir", "/etc"),
        ("dot-dot relative", os.path.relpath(secret, ws)),
        ("dot-dot absolute", f"{ws}/../../../outside/secret.txt"),
        ("dot-dot from a repo", f"{world.mine}/../outside/secret.txt"),
        ("symlinked file", "leak.txt"),
        ("symlinked file, absolute", str(ws / "leak.txt")),
        ("symlinked file in a repo", str(world.app / "leak.txt")),
        ("through a symlinked dir", "leak-dir/secret.txt"),
        ("symlinked dir", "leak-dir"),
        ("prefix trick", str(jail["evil"])),
        ("prefix trick dir", str(jail["evil_dir"])),
        ("home directory", "~/.bashrc"),
    ]


def refusal_ok(text: str, tool: str, label: str) -> None:
    assert_clear(text, tool)
    assert "access denied" in text.lower() and "outside every project workspace" in text, f"{label}: {text}"
    assert "TOP SECRET" not in text


async def test_read_file_refuses_escapes(client, services, world, jail):
    before = db_snapshot(services)
    for label, path in escapes(world, jail):
        text = await fail(client, "read_file", path=path, project_id="proj")
        refusal_ok(text, "read_file", label)
    text = await fail(client, "read_file", path="notes\0.txt", project_id="proj")
    assert_clear(text, "read_file", "NUL")
    assert db_snapshot(services) == before


async def test_read_file_allows_what_is_inside(client, world, jail):
    ws = jail["ws"]
    relative = await ok(client, "read_file", path="notes.txt", project_id="proj")
    assert relative["path"] == str(ws / "notes.txt") and relative["content"].startswith("line 1\n")
    assert (await ok(client, "read_file", path="sub/../notes.txt", project_id="proj"))["total_lines"] == 3
    await ok(client, "set_active_project", project_id="proj")
    assert (await ok(client, "read_file", path="sub/deep.txt"))["content"] == "deep\n"  # the active project
    linked = await ok(client, "read_file", path=str(world.mine / "app.py"))  # a linked repo outside the workspace
    assert linked["content"] == "print('hello')\n"
    inside = await ok(client, "read_file", path="inside-link.txt")  # a symlink that stays inside
    assert inside["path"] == str(ws / "notes.txt") and "line 3" in inside["content"]
    through = await ok(client, "read_file", path="inside-dir/README.md")
    assert through["path"] == str(world.mine / "README.md")
    cloned = await ok(client, "read_file", path=str(world.app / "README.md"))
    assert cloned["content"] == "# demo\n"


async def test_read_file_relative_without_a_project(client, world, jail):
    text = await fail(client, "read_file", path="notes.txt")
    assert_clear(text, "read_file", "relative", "set_active_project")


async def test_read_file_slices_and_refuses_non_text(client, world, jail):
    ws = jail["ws"]
    (ws / "long.txt").write_text("".join(f"line {i}\n" for i in range(1, 301)))
    first = await ok(client, "read_file", path="long.txt", project_id="proj")
    assert (first["total_lines"], first["truncated"]) == (300, True)
    assert first["content"].splitlines() == [f"line {i}" for i in range(1, 201)]  # max_lines=200 by default
    middle = await ok(client, "read_file", path="long.txt", project_id="proj", offset=10, max_lines=5)
    assert middle["content"] == "".join(f"line {i}\n" for i in range(11, 16)) and middle["truncated"] is True
    tail = await ok(client, "read_file", path="long.txt", project_id="proj", offset=295, max_lines=10)
    assert tail["content"].splitlines() == [f"line {i}" for i in range(296, 301)] and tail["truncated"] is False
    past = await ok(client, "read_file", path="long.txt", project_id="proj", offset=500)
    assert (past["content"], past["total_lines"], past["truncated"]) == ("", 300, False)

    (ws / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    assert_clear(await fail(client, "read_file", path="image.png", project_id="proj"), "read_file", "binary")
    assert_clear(await fail(client, "read_file", path="sub", project_id="proj"), "read_file", "directory",
                 "search_files")
    assert_clear(await fail(client, "read_file", path="nope.txt", project_id="proj"), "read_file",
                 "does not exist")
    assert_clear(await fail(client, "read_file", path="long.txt", project_id="proj", max_lines=0), "read_file",
                 "max_lines")
    assert_clear(await fail(client, "read_file", path="long.txt", project_id="proj", offset=-1), "read_file",
                 "offset")


async def test_search_files_refuses_escapes(client, services, world, jail):
    await ok(client, "set_active_project", project_id="proj")
    before = db_snapshot(services)
    for label, path in escapes(world, jail):
        for mode in ("grep", "find"):
            text = await fail(client, "search_files", pattern="SECRET" if mode == "grep" else "*", path=path,
                              mode=mode)
            refusal_ok(text, "search_files", f"{label} ({mode})")
    assert_clear(await fail(client, "search_files", pattern="x", path="sub\0"), "search_files", "NUL")
    assert db_snapshot(services) == before


async def test_search_files_does_not_follow_links_out(client, world, jail):
    ws = jail["ws"]
    grep = await ok(client, "search_files", pattern="SECRET", path=str(ws))
    assert grep["results"] == ["inside-link.txt:2:TOP SECRET inside", "notes.txt:2:TOP SECRET inside"]
    assert not any("outside" in hit or "prefix" in hit for hit in grep["results"])
    found = await ok(client, "search_files", pattern="*.txt", path=str(ws), mode="find")
    assert "leak.txt" not in found["results"] and not any(r.startswith("leak-dir") for r in found["results"])
    assert {"notes.txt", "inside-link.txt", "sub/deep.txt"} <= set(found["results"])
    in_repo = await ok(client, "search_files", pattern="SECRET", path=str(world.app))
    assert in_repo["results"] == []  # the repo's leak.txt points outside


async def test_search_files_allows_relative_linked_and_reports_truncation(client, world, jail):
    await ok(client, "set_active_project", project_id="proj")
    relative = await ok(client, "search_files", pattern="deep", path="sub")
    assert relative == {"results": ["deep.txt:1:deep"], "truncated": False, "note": None}
    dot = await ok(client, "search_files", pattern="line \\d", path=".")
    assert "notes.txt:1:line 1" in dot["results"]
    linked = await ok(client, "search_files", pattern="hello", path=str(world.mine))
    assert linked["results"] == ["app.py:1:print('hello')"]
    assert (await ok(client, "search_files", pattern="*.py", path=str(world.mine), mode="find"))["results"] == \
        ["app.py"]
    capped = await ok(client, "search_files", pattern="line", path="notes.txt", max_results=1)
    assert capped["results"] == ["notes.txt:1:line 1"] and capped["truncated"] is True
    literal = await ok(client, "search_files", pattern="SECRET (", path="notes.txt")
    assert literal["results"] == [] and "literally" in literal["note"]


async def test_run_command_refuses_escapes(client, services, world, jail, tmp_path):
    await ok(client, "set_active_project", project_id="proj")
    # `touch` in the working dir itself: the sandbox makes that dir writable, so only the refusal keeps it away.
    marker = "ran-escape-marker"
    before = db_snapshot(services)
    for label, path in escapes(world, jail):
        text = await fail(client, "run_command", command=f"touch {marker}", working_dir=path)
        refusal_ok(text, "run_command", label)
        assert not list(tmp_path.rglob(marker)), label
    text = await fail(client, "run_command", command=f"touch {marker}", working_dir="sub\0")
    assert_clear(text, "run_command", "NUL")
    assert not list(tmp_path.rglob(marker)) and db_snapshot(services) == before


async def test_run_command_working_dirs(client, world, jail):
    ws = jail["ws"]
    by_project = await ok(client, "run_command", command="pwd", working_dir="proj")
    assert by_project == {"returncode": 0, "stdout": f"{os.path.realpath(ws)}\n", "stderr": "", "timed_out": False}
    by_repo = await ok(client, "run_command", command="pwd; git rev-parse --abbrev-ref HEAD", working_dir="mine")
    assert by_repo["stdout"].split() == [str(world.mine), "main"]
    absolute = await ok(client, "run_command", command="ls", working_dir=str(world.app))
    assert "README.md" in absolute["stdout"].split()
    linked = await ok(client, "run_command", command="pwd", working_dir=str(world.mine))  # outside the workspace
    assert linked["stdout"] == f"{world.mine}\n"
    await ok(client, "set_active_project", project_id="proj")
    relative = await ok(client, "run_command", command="cat deep.txt", working_dir="sub")
    assert relative["stdout"] == "deep\n"
    through_link = await ok(client, "run_command", command="pwd", working_dir="inside-dir")
    assert through_link["stdout"] == f"{world.mine}\n"
    failing = await ok(client, "run_command", command="echo oops >&2; exit 3", working_dir="proj")
    assert (failing["returncode"], failing["stderr"], failing["timed_out"]) == (3, "oops\n", False)
    assert_clear(await fail(client, "run_command", command="true", working_dir="notes.txt"), "run_command",
                 "not a directory")
    assert_clear(await fail(client, "run_command", command="  ", working_dir="proj"), "run_command",
                 "command", "empty")
    assert_clear(await fail(client, "run_command", command="true", working_dir="proj", timeout=601), "run_command",
                 "timeout")


async def test_run_command_caps_output(client, world):
    done = await ok(client, "run_command", command="head -c 60000 /dev/zero | tr '\\0' a", working_dir="proj")
    assert done["returncode"] == 0 and not done["timed_out"]
    assert done["stdout"].startswith("a" * 24_000)  # the first 24,000 bytes (services/files.py STDOUT_LIMIT)
    assert "[output truncated: 36,000 more bytes of 60,000;" in done["stdout"]
    assert len(done["stdout"]) < 24_300


@pytest.mark.slow  # seconds of real waits (timeouts, caps, periods): left out of the fast loop
@pytest.mark.parametrize("era", ["modern"])  # slow (4 s) and nothing era-specific: run once
async def test_run_command_timeout_kills_the_process_group(client, world, tmp_path, era):
    marker = world.workspace / "late-child"  # where the command may write: only the kill stops it
    started = time.monotonic()
    done = await ok(client, "run_command", command=f"(sleep 3; touch {marker}) & sleep 30", working_dir="proj",
                    timeout=1)
    assert time.monotonic() - started < 3
    assert done["timed_out"] is True and done["returncode"] is None
    assert "timed out after 1 s" in done["stderr"]
    while time.monotonic() - started < 4:
        time.sleep(0.1)
    assert not marker.exists(), "a background child of the command outlived the timeout"


async def test_run_command_denied_by_policy(client, services, world, tmp_path, monkeypatch):
    marker = world.workspace / "ran"
    monkeypatch.setenv("AGENTQUEUE_RUN_COMMAND", "deny")
    await refused(client, services, "run_command", "denied by AgentQueue's policy", "AGENTQUEUE_RUN_COMMAND",
                  command=f"touch {marker}", working_dir="proj")
    assert not marker.exists()
    monkeypatch.setenv("AGENTQUEUE_RUN_COMMAND", "allow")  # read at each call
    await ok(client, "run_command", command=f"touch {marker}", working_dir="proj")
    assert marker.exists()
