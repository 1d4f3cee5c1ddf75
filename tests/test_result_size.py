"""No tool result over the budget (issue 13): big files, diffs, logs, outputs and lists come paged or cut, with a
note that says how to get the rest, and following the note returns the next part."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from agentqueue.services import result_size
from agentqueue.services.lifecycle import Lifecycle

from .git_fixtures import World, commit_file, git, git_env, git_templates, world  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("git_env")]

BUDGET = result_size.MAX_RESULT_CHARS


def size(result) -> int:
    """Counted characters of a tools/call result as the client got it: its text content plus its structure."""
    text = "".join(getattr(block, "text", "") for block in result.content)
    return result_size.cost(text) + len(json.dumps(result.structured_content, ensure_ascii=True))


async def call(client, tool: str, **args) -> dict:
    """Call a tool that must succeed and stay within the budget; returns its structured result."""
    result = await client.call_tool(tool, args)
    assert not result.is_error, f"{tool} failed: {result.content[0].text}"
    assert size(result) <= BUDGET, f"{tool}: {size(result):,} characters"
    return result.structured_content


def offset_in(note: str, tool: str) -> int:
    found = re.search(rf"{tool} (?:again )?with (?:\w+=\S+ )?offset=(\d+)", note)
    assert found, f"no '{tool} ... offset=N' in {note!r}"
    return int(found.group(1))


# -- files and commands ------------------------------------------------------------------------------

async def test_read_file_of_5_mb_pages_by_lines(client, world: World):
    lines = [f"{n:07d} " + "x" * 92 + "\n" for n in range(50_000)]  # 5 MB
    big = world.workspace / "big.txt"
    big.write_text("".join(lines))
    first = await call(client, "read_file", path=str(big), max_lines=5000)
    assert first["truncated"] and first["total_lines"] == 50_000
    assert "".join(lines).startswith(first["content"]) and first["content"].endswith("\n")
    shown = first["content"].count("\n")
    assert 100 < shown < 5000
    nxt = offset_in(first["note"], "read_file")
    assert nxt == shown and f"lines 1–{shown:,} of 50,000" in first["note"]
    second = await call(client, "read_file", path=str(big), max_lines=5000, offset=nxt)
    assert second["content"].startswith(lines[nxt])


async def test_read_file_of_one_5_mb_line_says_how_to_read_on(client, world: World):
    line = "".join(chr(ord("a") + n % 26) for n in range(5_000_000))
    (world.workspace / "min.js").write_text(line + "\n")
    part = await call(client, "read_file", path=str(world.workspace / "min.js"))
    assert part["truncated"] and line.startswith(part["content"])
    command = re.search(r"run_command `([^`]+)`", part["note"]).group(1)
    more = await call(client, "run_command", command=command, working_dir=str(world.workspace))
    shown = len(part["content"])
    assert more["stdout"].startswith(line[shown: shown + 1000])


async def test_search_files_with_many_hits_pages_by_offset(client, world: World):
    folder = world.workspace / "hits"
    folder.mkdir()
    for n in range(20):
        (folder / f"f{n:02d}.txt").write_text("".join(f"needle {n}:{i} " + "y" * 280 + "\n" for i in range(100)))
    first = await call(client, "search_files", pattern="needle", path=str(folder), max_results=1000)
    assert first["truncated"] and 10 < len(first["results"]) < 1000
    nxt = offset_in(first["note"], "search_files")
    assert nxt == len(first["results"])
    second = await call(client, "search_files", pattern="needle", path=str(folder), max_results=1000, offset=nxt)
    everything = [f"f{n:02d}.txt:{i + 1}:" for n in range(20) for i in range(100)]
    assert second["results"][0].startswith(everything[nxt])


async def test_a_command_printing_10_mb_is_cut_with_the_way_to_see_it_all(client, world: World):
    loud = "yes 'the quick brown fox' | head -c 10000000"
    done = await call(client, "run_command", command=loud, working_dir=str(world.workspace))
    assert "output truncated" in done["stdout"] and "> out.txt" in done["stdout"]
    await call(client, "run_command", command=f"{loud} > out.txt", working_dir=str(world.workspace))
    page = await call(client, "read_file", path=str(world.workspace / "out.txt"), offset=300_000, max_lines=5000)
    assert page["content"].startswith("the quick brown fox\n") and page["truncated"]
    # Output JSON would escape six-fold (NUL bytes become \u0000) is cut by its escaped size.
    zeros = await call(client, "run_command", command="head -c 100000 /dev/zero", working_dir=str(world.workspace))
    assert "output truncated" in zeros["stdout"]


# -- diffs and logs ----------------------------------------------------------------------------------

def big_branch(repo: Path) -> tuple[str, str]:
    """A branch `t/big` adding a 2 MB file and a small one; returns (the whole diff against main, the small file)."""
    git(repo, "switch", "-q", "-c", "t/big", "main")
    (repo / "big.txt").write_text("".join(f"row {n} " + "z" * 60 + "\n" for n in range(30_000)))
    git(repo, "add", "big.txt")
    commit_file(repo, "small.txt", "small\n", "big and small")
    git(repo, "switch", "-q", "main")
    return git(repo, "diff", "main...t/big"), "small.txt"


async def test_get_task_diff_of_2_mb_pages_and_shows_one_file(client, services, world: World):
    full, small = big_branch(world.app)
    assert len(full) > 2_000_000
    task = await call(client, "create_task", project_id="proj", title="big", description="d", repo_id="app")
    with services.store.transaction() as db:
        db["tasks"].update(task["id"], {"branch": "t/big"})
    first = await call(client, "get_task_diff", task_id=task["id"])
    assert (first["truncated"] and first["total_chars"] >= len(full) - 10
            and first["files_changed"] == ["big.txt", small])
    assert "path=" in first["note"]
    nxt = offset_in(first["note"], "get_task_diff")
    assert nxt == len(first["diff"])
    second = await call(client, "get_task_diff", task_id=task["id"], offset=nxt)
    assert (first["diff"] + second["diff"]).strip("\n") in full
    one = await call(client, "get_task_diff", task_id=task["id"], path=small)
    assert not one["truncated"] and "+small" in one["diff"] and "big.txt" not in one["diff"]


async def test_git_diff_of_2_mb_uncommitted_pages_per_repo(client, world: World):
    (world.app / "README.md").write_text("".join(f"line {n} " + "w" * 60 + "\n" for n in range(30_000)))
    first = await call(client, "git_diff", project_id="proj", repo_id="app")
    report = first["repos"][0]
    assert report["truncated"] and report["total_chars"] > 2_000_000
    nxt = offset_in(report["note"], "git_diff")
    second = await call(client, "git_diff", project_id="proj", repo_id="app", offset=nxt)
    assert second["repos"][0]["diff"].startswith(git(world.app, "diff", "HEAD")[nxt: nxt + 500].strip("\n")[:400])


@pytest.mark.slow
async def test_git_log_of_many_long_commits_is_cut_and_goes_on_by_offset(client, world: World):
    for n in range(300):
        git(world.app, "commit", "-q", "--allow-empty", "-m", f"commit {n:03d} " + "m" * 400)
    first = await call(client, "git_log", project_id="proj", repo_id="app", count=500)
    commits = first["repos"][0]["commits"]
    assert 10 < len(commits) < 300 and "git_log" in first["note"]
    nxt = offset_in(first["note"], "git_log")
    assert nxt == len(commits)
    second = await call(client, "git_log", project_id="proj", repo_id="app", count=500, offset=nxt)
    assert second["repos"][0]["commits"][0]["message"].startswith(f"commit {299 - nxt:03d} ")


@pytest.mark.both_eras
async def test_the_task_log_resource_is_paged(client, services, world: World):
    task = await call(client, "create_task", project_id="proj", title="talk", description="d", repo_id="app")
    log = services.home / "logs" / "tasks" / f"{task['id']}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("".join(f"agent line {n:06d}\n" for n in range(60_000)))  # 1.1 MB
    data = log.read_bytes()
    uri = f"agentqueue://tasks/{task['id']}/log"
    tail = (await client.read_resource(uri)).contents[0].text
    assert len(tail) <= result_size.RESOURCE_CHARS and tail.endswith("agent line 059999\n")
    earlier = re.search(r"earlier: (\S+?);", tail).group(1)
    assert "this is the end" in tail.splitlines()[0]
    page = (await client.read_resource(earlier)).contents[0].text
    start = int(earlier.rsplit("=", 1)[1])
    header, body = page.split("\n", 1)
    assert body == data[start: start + len(body)].decode() and len(page) <= result_size.RESOURCE_CHARS
    following = re.search(r"next: (\S+?)\]", header).group(1)
    after = (await client.read_resource(following)).contents[0].text.split("\n", 1)[1]
    assert after == data[start + len(body): start + len(body) + len(after)].decode()


@pytest.mark.slow  # seconds of real waits (timeouts, caps, periods): left out of the fast loop
async def test_a_huge_task_result_is_cut_and_points_to_the_log(client, services, world: World):
    task = await call(client, "create_task", project_id="proj", title="loud", description="d", repo_id="app")
    run = SimpleNamespace(status="failed", summary="s" * 1_000_000, error_type="crash", error_message="e" * 300_000,
                          tokens={"total": 1}, cost_usd=0.0)
    Lifecycle(services.store, services.tasks, services.usage).record_attempt(
        task["id"], None, run, 1.0, [f"file{n}.py" for n in range(20_000)])
    result = await call(client, "get_task_result", task_id=task["id"])
    assert "more characters cut" in result["result"]["summary"]
    assert f"agentqueue://tasks/{task['id']}/log" in result["message"]
    error = await call(client, "get_agent_error", task_id=task["id"])
    assert error["error_message"].startswith("eee")


async def test_a_long_note_pages_by_characters(client, world: World):
    content = "".join(f"paragraph {n}: " + "n" * 90 + "\n" for n in range(10_000))  # 1 MB
    await call(client, "write_note", project_id="proj", title="Long", content=content)
    first = await call(client, "read_note", project_id="proj", title="Long")
    assert first["truncated"] and content.startswith(first["content"]) and first["total_chars"] == len(content)
    nxt = offset_in(first["note"], "read_note")
    second = await call(client, "read_note", project_id="proj", title="Long", offset=nxt)
    assert content[nxt:].startswith(second["content"]) and second["content"]
    resource = (await client.read_resource("agentqueue://projects/proj/notes/long.md")).contents[0].text
    assert len(resource) <= result_size.RESOURCE_CHARS and "read_note" in resource


# -- lists at their largest limit --------------------------------------------------------------------

async def test_lists_at_their_largest_limit_stay_within_the_budget(client, services, world: World):
    titles = [f"task {n:03d} " + "t" * 240 for n in range(500)]  # near the 255-character title bound
    for title in titles:
        services.tasks.create("proj", title, "d", repo_id="app")
    first = await call(client, "list_tasks", project_id="proj", limit=500)
    shown = len(first["tasks"])
    assert 5 < shown < 500 and first["total"] == 500
    nxt = offset_in(first["note"], "list_tasks")
    assert nxt == shown
    second = await call(client, "list_tasks", project_id="proj", limit=500, offset=nxt)
    in_order = [t.id for t in services.tasks.list("proj", None, False, 500, 0)[0]]
    assert [t["id"] for t in first["tasks"]] == in_order[:nxt] and second["tasks"][0]["id"] == in_order[nxt]
    events = await call(client, "get_recent_events", limit=500)
    assert "limit=" in events["note"]
    for _ in range(500):
        services.audit.record(actor="client:test", action="x", decision="allow", arguments={"a": "q" * 8000},
                              project_id="proj")
    audit = await call(client, "get_audit_log", limit=500)
    assert 1 <= len(audit["entries"]) < 500 and "limit=" in audit["note"]
    hook = services.hooks.create("proj", "Loud", {"type": "periodic", "interval_seconds": 3600},
                                 prompt_template="say")
    for n in range(500):
        run_id = services.hooks.start_run(hook, "periodic", None, f"2026-01-01T00:{n // 60:02d}:{n % 60:02d}+00:00")
        services.hooks.finish_run(hook, run_id, "failed", response="r" * 10_000)
    runs = await call(client, "list_hook_runs", hook_id=hook.id, limit=500)
    assert 1 <= len(runs["runs"]) < 500 and "limit=" in runs["note"]
    for uri in ("agentqueue://audit", "agentqueue://projects/proj/tasks", "agentqueue://events/recent"):
        text = (await client.read_resource(uri)).contents[0].text
        assert len(text) <= result_size.RESOURCE_CHARS, uri
