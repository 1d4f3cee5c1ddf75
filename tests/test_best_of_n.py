"""Best of N (design.md "Best of N"): real git, real subprocesses, `command` agents, no model.

The same task runs on several agents at once; each candidate's branch is brought up to date and checked without
landing; the winner (by default the passing one with the smallest diff; with the project's best_of_pick="first" the
first to pass)
lands, the others keep their branches; none passing holds the group BLOCKED with each candidate's reason.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest
from mcp import Client

from agentqueue.engine.adapters import PARSERS
from agentqueue.engine.adapters.command import CommandParser
from agentqueue.engine.scheduler import schedule
from agentqueue.services import Services

from .conftest import on_both_backends
from .git_fixtures import commit_file, git, git_env  # noqa: F401  (git_env: fixture)
from .processes import wait_for
from .test_engine_lifecycle import engine_running, events, make_engine, run_until_final, status

pytestmark = pytest.mark.anyio

store_backend = on_both_backends()  # every test here runs on SQLite and on PostgreSQL (team mode's store)
slow = pytest.mark.slow  # several agent runs and checks each: seconds on two cores

# Each agent is told how to behave by its own argv (every candidate gets the same prompt): `good NAME N` adds N lines
# to the region of shared.txt, `bad NAME` adds a line the check refuses, `idle` changes nothing; `sleep S` waits first.
AGENT = r"""
import pathlib, sys, time
args = sys.argv[1:]
sys.stdin.read()
if "sleep" in args:
    time.sleep(float(args[args.index("sleep") + 1]))
path = pathlib.Path("shared.txt")
lines = path.read_text().splitlines()
end = lines.index("END")
if args[0] == "bad":
    lines.insert(end, "BAD line from " + args[1])
elif args[0] == "idle":
    pass  # changes nothing
else:
    lines[end:end] = [f"{args[1]} line {n}" for n in range(int(args[2]))]
path.write_text("\n".join(lines) + "\n")
print("TOKENS 1000")
"""
CHECK = r"""
import pathlib, sys
for line in pathlib.Path("shared.txt").read_text().splitlines():
    if "BAD" in line:
        sys.exit("BAD line found: " + line)
print("check passed")
"""


def agent(svc: Services, name: str, *args: str) -> str:
    return svc.agents.create(name, "command", command=shlex.join([sys.executable, "-c", AGENT, *args])).id


@pytest.fixture
def svc(services: Services, git_env: Path) -> Services:
    """Project 'demo' (room for five agents at once) whose check refuses a BAD line, with an `init` repo 'app'."""
    services.projects.create("Demo", max_concurrent_agents=5, verify_command=shlex.join([sys.executable, "check.py"]))
    services.repos.add("demo", "init", name="app")
    repo = checkout(services)
    commit_file(repo, "check.py", CHECK, "the check")
    commit_file(repo, "shared.txt", "BEGIN\nEND\n", "the region")
    return services


def checkout(svc: Services) -> Path:
    return Path(svc.repos.get("app").checkout_path)


def branch_exists(repo: Path, branch: str | None) -> bool:
    assert branch
    return git(repo, "branch", "--list", branch).strip() != ""


def main_text(svc: Services) -> str:
    return git(checkout(svc), "show", "main:shared.txt")


class CountingParser(CommandParser):
    """The command adapter, plus a `TOKENS n` line read as the run's token use: command agents report none, and
    the budget test needs runs that cost something. Everything after the parser (ledger, window, scheduler) is real."""

    def finish(self, exit_code: int | None):  # type: ignore[no-untyped-def]
        result = super().finish(exit_code)
        used = sum(int(line.split()[1]) for line in self.lines if line.startswith("TOKENS "))
        result.tokens = {"input": used, "output": 0, "cache_read": 0, "cache_write": 0, "total": used}
        return result


@slow
async def test_best_of_three_with_one_passing_candidate_lands_it(svc: Services, monkeypatch) -> None:
    monkeypatch.setitem(PARSERS, "command", CountingParser)
    agents = [agent(svc, "bad-1", "bad", "one"), agent(svc, "good", "good", "winner", "2"),
              agent(svc, "bad-2", "bad", "two")]
    region = git(checkout(svc), "rev-parse", "main")
    group = svc.tasks.create("demo", "Add lines", "Add your lines to the region.", candidates=agents)
    assert group.status == "DEFINED" and group.best_of == 3 and group.pick == "smallest"
    members = {c.agent_id: c.task_id for c in group.candidates}
    assert set(members) == set(agents) and all(c.outcome == "running" for c in group.candidates)
    # A task after the group waits for the group (no agent here can run it: it only shows it was promoted).
    after = svc.tasks.create("demo", "After", "Later work.", depends_on=[group.id], agent_type="codex")
    assert after.status == "DEFINED"
    await run_until_final(svc, make_engine(svc), group.id, timeout=120)
    assert status(svc, after.id) == "READY"

    done = svc.tasks.get(group.id)
    assert done.status == "COMPLETED", done.reason
    assert done.chosen == members["good"]
    text = main_text(svc)
    assert "winner line 0" in text and "winner line 1" in text and "BAD" not in text  # its change, not the others'
    repo = checkout(svc)
    diff = svc.vcs.task_diff(done)["diff"]  # the group's diff is its winner's
    assert "+winner line 0" in diff and "BAD" not in diff
    landed = git(repo, "rev-parse", "main")  # one commit with exactly the checked tree, on top of the region
    assert git(repo, "rev-parse", f"{landed}^1") == region and done.candidates
    shown = {c.task_id: c for c in done.candidates}
    assert shown[members["good"]].outcome == "chosen"
    for name in ("bad-1", "bad-2"):
        loser = svc.tasks.get(members[name])
        assert shown[loser.id].outcome == "failed" and "BAD line found" in (shown[loser.id].reason or "")
        assert loser.status == "COMPLETED"  # nothing more to do for it: not chosen
        assert branch_exists(repo, loser.branch)  # kept for review
        assert not (svc.home / "worktrees" / "app" / loser.id).exists()  # its worktree is gone
    # Every candidate's run is in the ledger, under the group; the budget counts their sum.
    rows = svc.store.all("SELECT task_id, total FROM token_ledger WHERE task_id IN (?, ?, ?)", tuple(members.values()))
    assert len(rows) == 3 and sum(r["total"] for r in rows) == 3000
    usage = svc.usage.summary(task_id=group.id)
    assert usage["total"]["total"] == 3000 and sum(b["runs"] for b in usage["breakdown"]) == 3
    engine = make_engine(svc)
    svc.projects.edit("demo", budget_limit=2500)  # below the three runs' sum, above any one of them
    late = svc.tasks.create("demo", "Later", "Anything.")
    state = engine.queue_state()
    assert next(p for p in state.projects if p.id == "demo").tokens_24h == 3000
    assert all(a.task_id != late.id for a in schedule(state))  # the cap saw the sum: nothing more runs


@slow
async def test_the_smallest_passing_diff_wins(svc: Services) -> None:
    agents = [agent(svc, "big", "good", "big", "4"), agent(svc, "small", "good", "small", "1", "sleep", "1"),
              agent(svc, "idle", "idle", "-")]
    group = svc.tasks.create("demo", "Add lines", "Add your lines.", candidates=agents)
    members = {c.agent_id: c.task_id for c in group.candidates}
    await run_until_final(svc, make_engine(svc), group.id, timeout=120)

    done = svc.tasks.get(group.id)
    assert done.status == "COMPLETED" and done.chosen == members["small"]
    text = main_text(svc)
    assert "small line 0" in text and "big line" not in text
    shown = {c.task_id: c for c in done.candidates}
    assert shown[members["small"]].lines_changed == 1 and shown[members["big"]].lines_changed == 4
    assert shown[members["big"]].outcome == "not_chosen"
    assert shown[members["idle"]].outcome == "failed" and "changed nothing" in (shown[members["idle"]].reason or "")
    assert branch_exists(checkout(svc), svc.tasks.get(members["big"]).branch)
    assert [e.payload["chosen"] for e in events(svc, group.id, "best_of.chosen")] == [members["small"]]
    memory = "".join(p.read_text() for p in svc.memory.folder("demo").rglob("*.md"))
    assert f"task {group.id} \"Add lines\" completed: best of 3, candidate {members['small']} (small)" in memory


@slow
async def test_best_of_pick_first_lands_the_first_to_pass_and_stops_the_rest(svc: Services) -> None:
    agents = [agent(svc, "quick", "good", "quick", "5"), agent(svc, "slow", "good", "slow", "1", "sleep", "30")]
    svc.projects.edit("demo", best_of_pick="first")  # the project's rule for its best-of-N tasks
    group = svc.tasks.create("demo", "Add lines", "Add your lines.", candidates=agents)
    assert group.pick == "first"
    members = {c.agent_id: c.task_id for c in group.candidates}
    async with engine_running(make_engine(svc)):
        await wait_for(lambda: status(svc, group.id) == "COMPLETED" and status(svc, members["slow"]) == "COMPLETED",
                       60, "the group to land its first passing candidate, and the other to be set aside")

    done = svc.tasks.get(group.id)
    assert done.chosen == members["quick"]  # the first to pass, though its diff is bigger
    assert "quick line 4" in main_text(svc) and "slow line" not in main_text(svc)
    slow = svc.tasks.get(members["slow"])
    assert events(svc, slow.id, "task.blocked")  # stopped at once, not left to run its 30 s
    assert {c.task_id: c.outcome for c in done.candidates}[slow.id] == "not_chosen"
    assert branch_exists(checkout(svc), slow.branch)  # what it had done is kept


@slow
async def test_none_passes_blocks_the_group_with_each_reason(svc: Services) -> None:
    agents = [agent(svc, "bad-1", "bad", "one"), agent(svc, "bad-2", "bad", "two")]
    group = svc.tasks.create("demo", "Add lines", "Add your lines.", candidates=agents)
    before = git(checkout(svc), "rev-parse", "main")
    await run_until_final(svc, make_engine(svc), group.id, timeout=120)

    done = svc.tasks.get(group.id)
    assert done.status == "BLOCKED"
    assert done.reason and "BAD line from one" in done.reason and "BAD line from two" in done.reason
    assert all(c.task_id in done.reason for c in done.candidates)
    assert done.next_step and "restart_task" in done.next_step
    assert git(checkout(svc), "rev-parse", "main") == before
    for c in done.candidates:
        assert c.outcome == "failed" and branch_exists(checkout(svc), c.branch)


async def test_bad_candidates_are_refused_through_the_official_client_and_nothing_is_created(svc: Services) -> None:
    from agentqueue.server.app import build_server

    from .conftest import EVERY_TOOL, db_snapshot
    from .test_bad_input import problems_with

    agent(svc, "one", "good", "one", "1")
    agent(svc, "two", "good", "two", "1")
    base = {"project_id": "demo", "title": "t", "description": "d"}
    cases = [
        ({"candidates": 1}, ["candidates must be 2 to 5", "got 1", "leave it out"]),
        ({"candidates": 6}, ["candidates must be 2 to 5", "got 6"]),
        ({"candidates": ["one"]}, ["candidates must be 2 to 5", "got 1"]),
        ({"candidates": ["one", "one"]}, ["names an agent twice"]),
        ({"candidates": ["one", "ghost"]}, ["'ghost' not found", "list_agents"]),
        ({"candidates": ["one", "two"], "agent_type": "codex"}, ["is a command agent, not codex"]),
        ({"candidates": 3, "requires_approval": True}, ["cannot be combined with requires_approval"]),
        ({"candidates": "three"}, ["candidates"]),
        ({"candidates": [1, 2]}, ["candidates"]),
    ]
    async with Client(build_server(svc, EVERY_TOOL)) as client:
        for extra, needles in cases:
            before = db_snapshot(svc)
            result = await client.call_tool("create_task", {**base, **extra})
            text = " ".join(getattr(block, "text", "") for block in result.content)
            assert result.is_error, (extra, result.structured_content)
            assert not problems_with("create_task", text, needles), (extra, text)  # says what to do, not internal
            assert db_snapshot(svc) == before, extra  # nothing created
        before = db_snapshot(svc)
        refused = await client.call_tool("edit_project", {"project_id": "demo", "best_of_pick": "largest"})
        assert refused.is_error and db_snapshot(svc) == before
        made = (await client.call_tool("create_task", {**base, "candidates": 2})).structured_content
    assert made and made["best_of"] == 2 and made["status"] == "DEFINED"
    assert sorted(c["agent_id"] for c in made["candidates"]) == ["one", "two"]  # each pinned to a different agent


@slow
@pytest.mark.parametrize("store_backend", ["sqlite"])  # the terminal reads the home's SQLite file here
async def test_a_hostile_title_and_agent_output_are_shown_escaped(svc: Services, tmp_path: Path,
                                                                 store_backend: str) -> None:
    from agentqueue.cli.reads import open_store_for_reading, task as read_task

    from .cli_helpers import cli_env, cli_in_process
    from .test_terminal_safety import assert_safe

    hostile = "evil \x1b]0;owned\x07 <script>alert(1)</script> \u202etxt"
    agents = [agent(svc, "bad-1", "bad", hostile), agent(svc, "bad-2", "bad", "two")]
    group = svc.tasks.create("demo", "Add lines", "Add your lines.", candidates=agents)
    with svc.store.transaction() as db:  # create_task refuses controls in a title; a store from before may hold one
        db["tasks"].update(group.id, {"title": hostile})
    await run_until_final(svc, make_engine(svc), group.id, timeout=120)
    assert status(svc, group.id) == "BLOCKED"

    store = open_store_for_reading(svc.home)
    try:
        assert read_task(store, group.id)["candidates"] == [c.model_dump() for c in svc.tasks.get(group.id).candidates]
    finally:
        store.close()
    ran = cli_in_process(cli_env(svc.home, tmp_path / "user"), "show", group.id, width=200)
    assert ran.returncode == 0, ran.stderr
    assert_safe(ran.stdout)
    flat = " ".join(ran.stdout.split())
    assert "evil \\x1b]0;owned\\x07 <script>alert(1)</script>" in flat  # shown, inert
    assert flat.count("candidate ") >= 2 and " failed: verify command `" in flat and "BAD line found" in flat


@slow
async def test_a_person_restarts_discards_and_stops_candidates(svc: Services) -> None:
    """After none passed: delete_task on a candidate discards its branch (asked for), restart_task on the group runs
    the others again; stop_task on a group stops its candidates too."""
    agents = [agent(svc, "bad-1", "bad", "one"), agent(svc, "bad-2", "bad", "two")]
    group = svc.tasks.create("demo", "Add lines", "Add your lines.", candidates=agents)
    engine = make_engine(svc)
    await run_until_final(svc, engine, group.id, timeout=120)
    assert status(svc, group.id) == "BLOCKED"
    first, second = (svc.tasks.get(c.task_id) for c in svc.tasks.get(group.id).candidates)
    repo = checkout(svc)

    svc.tasks.delete(first.id)  # the engine built on these services discards the kept branch with it
    assert not branch_exists_quiet(repo, first.branch) and branch_exists(repo, second.branch)
    assert [c.task_id for c in svc.tasks.get(group.id).candidates] == [second.id]

    previous, now = svc.tasks.restart(group.id)
    assert (previous, now) == ("BLOCKED", "DEFINED")
    assert status(svc, second.id) == "READY" and svc.tasks.get(group.id).reason is None

    svc.tasks.stop(group.id)
    assert status(svc, group.id) == "BLOCKED" and status(svc, second.id) == "BLOCKED"
    svc.tasks.delete(group.id)  # the group goes with its candidates
    assert not svc.tasks.exists(second.id)


def branch_exists_quiet(repo: Path, branch: str | None) -> bool:
    return bool(branch) and git(repo, "branch", "--list", branch or "").strip() != ""


@slow
async def test_fewer_agents_than_candidates_run_them_one_after_another(svc: Services) -> None:
    """candidates=3 with one agent: one candidate is pinned to it, the others take any agent; a candidate that
    passed holds no agent while it waits, so the one agent runs all three and the group is decided."""
    only = agent(svc, "only", "good", "only", "1")
    group = svc.tasks.create("demo", "Add a line", "Add your line.", candidates=3)
    assert sorted(c.agent_id or "" for c in group.candidates) == ["", "", only]
    await run_until_final(svc, make_engine(svc), group.id, timeout=120)

    done = svc.tasks.get(group.id)
    assert done.status == "COMPLETED", done.reason
    assert sorted(c.outcome for c in done.candidates) == ["chosen", "not_chosen", "not_chosen"]
    assert {r["agent_id"] for r in svc.store.all("SELECT agent_id FROM task_results WHERE task_id IN (?, ?, ?)",
                                                 tuple(c.task_id for c in done.candidates))} == {only}
    assert main_text(svc).count("only line 0") == 1  # one candidate's change landed, not three
