"""The merge queue (design.md "Merge queue"): real git, real subprocesses, `command` agents, no model.

Six tasks edit the same lines of one file at once and all land: the ones that conflict are sent back to their
agent with the conflict, which resolves it (keeping both sides) and commits, and then land; every first-parent
commit on main passes the repo's check. A task whose change fails the check never reaches main: it is sent
back the capped number of times, then BLOCKED with the check's output.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from agentqueue.engine.prompting import task_prompt
from agentqueue.services import Services

from .git_fixtures import commit_file, git, git_env, porcelain  # noqa: F401  (git_env: fixture)
from .test_engine_lifecycle import events, make_engine, run_until_final, status

pytestmark = pytest.mark.anyio

# Adds its line (the task's `LINE <text>`) inside the file's region; sent back with a conflict, it keeps both
# sides (drops only the marker lines) and commits the merge itself.
AGENT = r"""
import pathlib, re, subprocess, sys, time
prompt = sys.stdin.read()
pause = re.search(r"^SLEEP ([0-9.]+)$", prompt, re.M)
time.sleep(float(pause[1]) if pause else 0)
path = pathlib.Path("shared.txt")
text = path.read_text()
if "<<<<<<<" in text:
    kept = [l for l in text.splitlines() if not l.startswith(("<<<<<<<", "=======", ">>>>>>>"))]
    path.write_text("\n".join(kept) + "\n")
    subprocess.run(["git", "add", "shared.txt"], check=True)
    subprocess.run(["git", "-c", "user.name=Agent", "-c", "user.email=agent@example.com", "commit", "-q",
                    "--no-edit"], check=True)
    print("resolved the conflict, keeping both sides")
else:
    line = re.search(r"^LINE (.*)$", prompt, re.M)[1]
    if line not in text.splitlines():
        lines = text.splitlines()
        lines.insert(lines.index("END"), line)
        path.write_text("\n".join(lines) + "\n")
    print("added", line)
"""
AGENT_COMMAND = shlex.join([sys.executable, "-c", AGENT])
# The repo's check: the region is intact, has no conflict marker and no line saying BAD.
CHECK = r"""
import pathlib, sys
lines = pathlib.Path("shared.txt").read_text().splitlines()
if lines[0] != "BEGIN" or lines[-1] != "END":
    sys.exit("the region's BEGIN or END is gone")
for line in lines:
    if line.startswith(("<<<<<<<", "=======", ">>>>>>>")):
        sys.exit("conflict marker left: " + line)
    if "BAD" in line:
        sys.exit("BAD line found: " + line)
print("check passed:", len(lines) - 2, "lines")
"""


@pytest.fixture
def svc(services: Services, git_env: Path) -> Services:
    """Project 'demo' whose check is the repo's check.py (CHECK), with an `init` repo 'app' holding the region in
    shared.txt."""
    services.projects.create("Demo", max_concurrent_agents=6, verify_command=shlex.join([sys.executable, "check.py"]))
    services.repos.add("demo", "init", name="app")
    repo = Path(services.repos.get("app").checkout_path)
    commit_file(repo, "check.py", CHECK, "the check")
    commit_file(repo, "shared.txt", "BEGIN\nEND\n", "the region")
    return services


def checkout(svc: Services) -> Path:
    return Path(svc.repos.get("app").checkout_path)


def first_parents(repo: Path) -> list[str]:
    """main's first-parent commits from the one that added the region (the queue's landings follow it)."""
    region = git(repo, "log", "--format=%H", "--diff-filter=A", "main", "--", "shared.txt")
    return git(repo, "rev-list", "--first-parent", f"{region}^..main").split()


def check_passes(repo: Path, commit: str, command: str, tmp_path: Path) -> bool:
    """Run the repo's check on one commit, in a worktree of its own."""
    tree = tmp_path / f"at-{commit[:12]}"
    git(repo, "worktree", "add", "--quiet", "--detach", str(tree), commit)
    try:
        return subprocess.run(shlex.split(command), cwd=tree, capture_output=True).returncode == 0
    finally:
        git(repo, "worktree", "remove", "--force", str(tree))


def runs(svc: Services, task_id: str) -> list[dict]:
    return svc.store.all("SELECT attempt, agent_id, status, error_type FROM task_results WHERE task_id = ? "
                         "ORDER BY attempt", (task_id,))


def ledger_rows(svc: Services, task_id: str) -> int:
    return int(svc.store.scalar("SELECT count(*) FROM token_ledger WHERE task_id = ?", (task_id,)))


@pytest.mark.slow  # ~11 s: the fast loop keeps the send-back tests below
async def test_six_tasks_on_the_same_lines_all_land_and_main_stays_green(svc: Services, tmp_path: Path) -> None:
    # A task is sent back only when main moved since its branch last took it in, i.e. after another task landed; such
    # a conflict spends none of the default cap (2) while its agent resolves it (tests/test_merge_contention.py).
    for n in range(6):
        svc.agents.create(f"worker-{n}", "command", command=AGENT_COMMAND)
    tasks = [svc.tasks.create("demo", f"Line {n}", f"LINE task {n} was here\nSLEEP 1", repo_id="app") for n in range(6)]
    await run_until_final(svc, make_engine(svc), *(t.id for t in tasks), timeout=180)

    assert [status(svc, t.id) for t in tasks] == ["COMPLETED"] * 6, [svc.tasks.get(t.id).reason for t in tasks]
    repo = checkout(svc)
    final = git(repo, "show", "main:shared.txt").splitlines()
    assert sorted(final[1:-1]) == [f"task {n} was here" for n in range(6)]  # no line of any task lost
    assert final[0] == "BEGIN" and final[-1] == "END"
    command = svc.projects.get("demo").verify_command
    assert command
    assert all(check_passes(repo, commit, command, tmp_path) for commit in first_parents(repo))
    assert porcelain(repo) == ""

    sent_back = [t for t in tasks if events(svc, t.id, "task.sent_back")]
    assert sent_back, "six tasks on the same lines: some conflicted"
    for task in sent_back:
        history = runs(svc, task.id)
        sends = events(svc, task.id, "task.sent_back")
        assert len(history) == len(sends) + 1 == ledger_rows(svc, task.id)  # every attempt is a run in the ledger
        assert {r["agent_id"] for r in history} == {history[0]["agent_id"]}  # back to the agent that did the work
        assert all(e.payload["kind"] == "conflict" and e.payload["conflicts"] == ["shared.txt"] for e in sends)
        assert [e.payload["agent_id"] for e in sends] == [history[0]["agent_id"]] * len(sends)
        # What its agent was told: the conflict hunks, and the commits that had landed meanwhile.
        told = svc.feedback.comments(task.id)[-1].comment
        assert "<<<<<<<" in told and ">>>>>>>" in told and "Commits that landed on 'main'" in told
        assert "Sent back by the merge queue" in task_prompt(svc.tasks.get(task.id), svc.feedback.comments(task.id))
    # Tested one at a time, in the order they entered the queue (a task sent back enters again at the end).
    waiting: list[str] = []
    for event in sorted((e for t in tasks for e in events(svc, t.id)), key=lambda e: e.id):
        if event.event_type == "merge_queue.entered":
            waiting.append(event.task_id)
        elif event.event_type == "merge_queue.testing":
            assert waiting and waiting.pop(0) == event.task_id, (event.task_id, waiting)
    assert waiting == []
    # Landed one at a time, in order: each first-parent commit after the region's moves main by one task.
    assert len(first_parents(repo)) >= 7


async def test_a_task_that_fails_the_check_never_lands_and_is_blocked_after_the_cap(svc: Services) -> None:
    svc.agents.create("worker", "command", command=AGENT_COMMAND)
    bad = svc.tasks.create("demo", "Bad line", "LINE BAD line from the task", repo_id="app")
    before = git(checkout(svc), "rev-parse", "main")
    engine = make_engine(svc)
    await run_until_final(svc, engine, bad.id, timeout=90)

    task = svc.tasks.get(bad.id)
    assert task.status == "BLOCKED"
    repo = checkout(svc)
    assert git(repo, "rev-parse", "main") == before  # never reached main
    assert "BAD" not in git(repo, "show", "main:shared.txt")
    sends = events(svc, bad.id, "task.sent_back")
    assert [(e.payload["kind"], e.payload["attempt"], e.payload["cap"]) for e in sends] == [("check", 1, 2),
                                                                                          ("check", 2, 2)]
    history = runs(svc, bad.id)
    assert len(history) == 3 == ledger_rows(svc, bad.id)  # the run and its two reruns, each in the ledger
    assert all(r["error_type"] == "verify_failed" for r in history)
    assert len({r["agent_id"] for r in history}) == 1
    # BLOCKED with the check's output, and a next step.
    assert task.reason and "BAD line found" in task.reason
    assert task.next_step
    # The reruns were told the output.
    told = svc.feedback.comments(bad.id)[-1].comment
    assert "BAD line found: BAD line from the task" in told and "Sent back 2 of 2" in told
    assert "[verify] $" in engine.log_path(bad.id).read_text()


async def test_without_checks_a_conflict_is_sent_back_and_both_land(services: Services, git_env: Path) -> None:
    """The fast path (no checks): a conflict goes back to its agent too, left mid-merge for it."""
    services.projects.create("Fast", max_concurrent_agents=2)
    services.repos.add("fast", "init", name="fast-repo")
    repo = Path(services.repos.get("fast-repo").checkout_path)
    commit_file(repo, "shared.txt", "BEGIN\nEND\n", "the region")
    for n in range(2):
        services.agents.create(f"fast-{n}", "command", command=AGENT_COMMAND)
    tasks = [services.tasks.create("fast", f"Fast {n}", f"LINE fast {n}\nSLEEP {0.5 + n}",
                                    repo_id="fast-repo") for n in range(2)]
    await run_until_final(services, make_engine(services), *(t.id for t in tasks), timeout=90)
    assert [status(services, t.id) for t in tasks] == ["COMPLETED"] * 2
    final = git(repo, "show", "main:shared.txt").splitlines()
    assert sorted(final[1:-1]) == ["fast 0", "fast 1"]
    sent = [e for t in tasks for e in events(services, t.id, "task.sent_back")]
    assert [e.payload["kind"] for e in sent] == ["conflict"]  # both left main at once: the second conflicted


# -- the queue shown: get_status, `agentqueue status`, the board --------------------------------------------------
HOSTILE = "evil \x1b]0;owned\x07 <script>alert(1)</script> \u202etxt"


def queue_of_three(svc: Services) -> tuple[str, str, str]:
    """Three tasks of repo 'app' put where the engine puts them: one landing, one waiting, one sent back."""
    from agentqueue.services.lifecycle import Lifecycle

    lifecycle = Lifecycle(svc.store, svc.tasks, svc.usage)
    ids = []
    for n, title in enumerate(["Hostile", "Waits its turn", "Went back"]):
        agent = svc.agents.create(f"shown-{n}", "command", command=AGENT_COMMAND).id
        task = svc.tasks.create("demo", title, "LINE x", repo_id="app").id
        if n == 0:  # create_task refuses controls in a title now; a store from before may still hold one
            with svc.store.transaction() as db:
                db["tasks"].update(task, {"title": HOSTILE})
        assert lifecycle.claim(task, agent)
        lifecycle.started(task, f"{task}/branch")
        lifecycle.verifying(task)
        with svc.store.transaction():
            svc.store.add_event("merge_queue.entered", project_id="demo", task_id=task, payload={"repo_id": "app"})
        ids.append((task, agent))
    (landing, _), (waiting, _), (back, back_agent) = ids
    with svc.store.transaction():
        svc.store.add_event("merge_queue.testing", project_id="demo", task_id=landing, payload={"repo_id": "app"})
    assert lifecycle.send_back(back, back_agent, "told", {"kind": "conflict", "conflicts": ["shared.txt"],
                                                         "attempt": 1, "cap": 2, "agent_id": back_agent})
    return landing, waiting, back


async def test_get_status_the_terminal_and_the_board_show_each_repos_queue(svc: Services, tmp_path: Path) -> None:
    from mcp import Client

    from agentqueue.board import data as board_data
    from agentqueue.board.routes import _environment
    from agentqueue.server.app import build_server

    from .cli_helpers import cli_env, cli_in_process
    from .conftest import EVERY_TOOL, ok
    from .test_terminal_safety import assert_safe

    landing, waiting, back = queue_of_three(svc)
    async with Client(build_server(svc, EVERY_TOOL)) as client:
        status = await ok(client, "get_status")
    assert status["merge_queue"] == [{
        "repo_id": "app", "landing": {"id": landing, "title": HOSTILE},
        "waiting": [{"id": waiting, "title": "Waits its turn"}],
        "sent_back": [{"id": back, "title": "Went back", "status": "READY", "agent_id": "shown-2",
                       "why": "conflict in shared.txt (1 of 2)", "at": status["merge_queue"][0]["sent_back"][0]["at"]}],
    }]

    shown = cli_in_process(cli_env(svc.home, tmp_path / "user"), "status", width=120)
    assert shown.returncode == 0, shown.stderr
    assert_safe(shown.stdout)
    flat = " ".join(shown.stdout.split())
    assert f"merge queue app: landing {landing} 'evil \\x1b]0;owned\\x07" in flat
    assert f"waiting {waiting}" in flat
    assert f"sent back {back} 'Went back' to shown-2: conflict in shared.txt (1 of 2)" in flat

    page = _environment().get_template("overview.html").render(request=None, csrf="", feed="",
                                                               **board_data.overview(svc))
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert 'id="merge-queue"' in page and f'href="/tasks/{back}"' in page and "conflict in shared.txt" in page


# -- team mode: two daemons, one queue per repo, landing through origin ----------------------------------------------
@pytest.mark.pg
async def test_two_daemons_keep_one_queue_per_repo_and_land_through_origin(
        tmp_path: Path, git_env: Path, pg_server: object, monkeypatch: pytest.MonkeyPatch) -> None:
    from .git_fixtures import make_repo
    from .processes import wait_for
    from .test_engine_lifecycle import engine_running

    url = pg_server.database()  # type: ignore[attr-defined]
    monkeypatch.setenv("AGENTQUEUE_DATABASE_URL", url)
    seed = make_repo(tmp_path / "seed")
    commit_file(seed, "check.py", CHECK, "the check")
    commit_file(seed, "shared.txt", "BEGIN\nEND\n", "the region")
    origin = tmp_path / "origin.git"
    git(tmp_path, "clone", "-q", "--bare", str(seed), str(origin))
    git(origin, "config", "core.logAllRefUpdates", "always")  # a reflog of main: every update origin accepted
    monkeypatch.setenv("AGENTQUEUE_LABELS", "a")
    first = Services(tmp_path / "daemon-a")
    monkeypatch.setenv("AGENTQUEUE_LABELS", "b")
    second = Services(tmp_path / "daemon-b")
    try:
        first.projects.create("Demo", max_concurrent_agents=4, verify_command=shlex.join([sys.executable, "check.py"]))
        first.projects.edit("demo", merge_retries=8)
        first.repos.add("demo", "clone", url=str(origin), name="app")
        for n in range(4):  # two agents per daemon: each runs only on the daemon with its label
            first.agents.create(f"worker-{n}", "command", command=AGENT_COMMAND, label="ab"[n % 2])
        tasks = [first.tasks.create("demo", f"Line {n}", f"LINE team {n}\nSLEEP 1", repo_id="app").id
                 for n in range(4)]
        async with engine_running(make_engine(first)), engine_running(make_engine(second)):
            await wait_for(lambda: all(first.tasks.get(t).status in ("COMPLETED", "BLOCKED") for t in tasks), 240,
                           "the four tasks to land")
        assert [first.tasks.get(t).status for t in tasks] == ["COMPLETED"] * 4, \
            [first.tasks.get(t).reason for t in tasks]
        final = git(origin, "show", "main:shared.txt").splitlines()
        assert sorted(final[1:-1]) == [f"team {n}" for n in range(4)]
        # Never forced: every value origin's main had is an ancestor of the next.
        history = git(origin, "reflog", "show", "--format=%H", "refs/heads/main").split()[::-1]
        for old, new in zip(history, history[1:], strict=False):
            assert subprocess.run(["git", "merge-base", "--is-ancestor", old, new], cwd=origin).returncode == 0
        # Every first-parent commit the queue landed passes the check.
        command = shlex.join([sys.executable, "check.py"])
        region = git(origin, "log", "--format=%H", "--diff-filter=A", "main", "--", "shared.txt")
        assert all(check_passes(origin, c, command, tmp_path)
                   for c in git(origin, "rev-list", "--first-parent", f"{region}^..main").split())
        # One candidate under test per repo across both daemons: the spans from `merge_queue.testing` to the end of
        # that landing (completed, sent back, held) never overlap.
        spans = []
        for task in tasks:
            kinds = [(e.id, e.event_type) for e in events(first, task)]
            for n, (start, kind) in enumerate(kinds):
                if kind == "merge_queue.testing":
                    end = next(i for i, k in kinds[n + 1:] if k in ("task.completed", "task.sent_back", "task.blocked"))
                    spans.append((start, end))
        spans.sort()
        assert len(spans) >= 4 and all(a[1] < b[0] for a, b in zip(spans, spans[1:], strict=False)), spans
        ran_on = {r["agent_id"][-1] for t in tasks for r in runs(first, t)}
        assert {int(n) % 2 for n in ran_on} == {0, 1}, "both daemons ran tasks"
    finally:
        first.close()
        second.close()


# -- the details: the person commits meanwhile, unresolved markers, rebase ------------------------------------------
async def test_main_moved_during_the_check_is_merged_and_checked_again(svc: Services,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The person commits on main while a task's check runs: the task is updated and checked again, and main moves
    only to a commit that was checked, with the person's commit under it."""
    repo = checkout(svc)
    real_run = type(svc.files).run
    checked: list[str] = []

    def run(self, command, working_dir, *args, **kwargs):  # noqa: ANN001, ANN202
        if kwargs.get("actor") == "verify":
            checked.append(git(working_dir, "rev-parse", "HEAD"))
            if len(checked) == 1:
                commit_file(repo, "person.txt", "the person's own work\n", "the person commits meanwhile")
        return real_run(self, command, working_dir, *args, **kwargs)

    monkeypatch.setattr(type(svc.files), "run", run)
    svc.agents.create("worker", "command", command=AGENT_COMMAND)
    task = svc.tasks.create("demo", "One line", "LINE one line", repo_id="app")
    await run_until_final(svc, make_engine(svc), task.id, timeout=60)
    assert status(svc, task.id) == "COMPLETED"
    # main moved to one commit on the person's, with exactly the checked tree (the checked tip is its second parent)
    assert len(checked) == 2
    assert git(repo, "rev-parse", "main^{tree}") == git(repo, "rev-parse", f"{checked[1]}^{{tree}}")
    assert git(repo, "rev-parse", "main^2") == checked[1]
    assert git(repo, "log", "-1", "--format=%s", "main^1") == "the person commits meanwhile"
    assert git(repo, "show", "main:person.txt") == "the person's own work"
    assert "one line" in git(repo, "show", "main:shared.txt").splitlines()
    assert not events(svc, task.id, "task.sent_back")


# Adds its line; sent back with a conflict, it changes nothing (the markers stay).
LAZY = AGENT.replace('if "<<<<<<<" in text:', 'if "<<<<<<<" in text:\n    print("left it")\nelif False:')


async def test_markers_left_in_the_work_never_land_and_the_task_is_sent_back_then_held(svc: Services) -> None:
    from .processes import wait_for
    from .test_engine_lifecycle import engine_running

    svc.agents.create("lazy", "command", command=shlex.join([sys.executable, "-c", LAZY]))
    lazy = svc.tasks.create("demo", "Leaves markers", "LINE lazy line\nSLEEP 1", repo_id="app")
    repo = checkout(svc)
    async with engine_running(make_engine(svc)):
        await wait_for(lambda: status(svc, lazy.id) == "IN_PROGRESS", 30, "the lazy run")
        commit_file(repo, "shared.txt", "BEGIN\nthe person's line\nEND\n", "the person edits the region")
        await wait_for(lambda: status(svc, lazy.id) in ("COMPLETED", "BLOCKED"), 60, "the lazy task to settle")
    task = svc.tasks.get(lazy.id)
    assert task.status == "BLOCKED" and task.reason and "shared.txt" in task.reason
    # The conflict spends no retry (the person's edit landed after the branch left main); each rerun that leaves the
    # markers is a send-back without a new resolution, capped by merge_retries (2).
    sends = events(svc, lazy.id, "task.sent_back")
    assert [(e.payload["kind"], e.payload["spends"]) for e in sends] == [
        ("conflict", None), ("unresolved", "conflict"), ("unresolved", "conflict")]
    assert "no new resolution" in task.reason
    assert len(runs(svc, lazy.id)) == 4 and {r["agent_id"] for r in runs(svc, lazy.id)} == {"lazy"}
    for commit in first_parents(repo):
        assert "<<<<<<<" not in git(repo, "show", f"{commit}:shared.txt")
    assert git(repo, "show", "main:shared.txt") == "BEGIN\nthe person's line\nEND"
    assert "ended with conflicts still unresolved in shared.txt" in svc.feedback.comments(lazy.id)[-1].comment


async def test_a_repo_that_rebases_lands_a_straight_line(services: Services, git_env: Path) -> None:
    services.projects.create("Straight", max_concurrent_agents=2,
                             verify_command=shlex.join([sys.executable, "check.py"]))
    services.repos.add("straight", "init", name="line", update_method="rebase")
    repo = Path(services.repos.get("line").checkout_path)
    commit_file(repo, "check.py", CHECK, "the check")
    commit_file(repo, "shared.txt", "BEGIN\nEND\n", "the region")
    writer = shlex.join([sys.executable, "-c", "import re, subprocess, sys; n = re.search(r'^FILE (\\S+)', "
                         "sys.stdin.read(), re.M)[1]; open(n, 'w').write(n + '\\n'); import time; time.sleep(0.5)"])
    for n in range(2):
        services.agents.create(f"writer-{n}", "command", command=writer)
    tasks = [services.tasks.create("straight", f"File {n}", f"FILE f{n}.txt", repo_id="line") for n in range(2)]
    await run_until_final(services, make_engine(services), *(t.id for t in tasks), timeout=60)
    assert [status(services, t.id) for t in tasks] == ["COMPLETED"] * 2
    assert git(repo, "rev-list", "--merges", "main") == ""  # rebased, never merged
    assert {git(repo, "show", f"main:f{n}.txt") for n in range(2)} == {"f0.txt", "f1.txt"}


def test_bad_settings_are_refused_with_what_to_do_and_change_nothing(svc: Services) -> None:
    from agentqueue.services.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match=r"merge_retries must be 0 to 10 \(got 11\)"):
        svc.projects.edit("demo", merge_retries=11)
    assert svc.projects.get("demo").merge_retries is None
    assert svc.projects.edit("demo", merge_retries=0).merge_retries == 0
    with pytest.raises(InvalidInputError, match="Unknown update_method 'squash'. Use merge"):
        svc.repos.add("demo", "init", name="other", update_method="squash")
    assert [r.id for r in svc.repos.list("demo")] == ["app"]
    assert svc.repos.get("app").update_method is None  # merge, the default


async def test_the_queue_runs_the_repos_declared_checks_with_the_tasks_port(services: Services, git_env: Path) -> None:
    """A repo's `[[checks]]` in .agentqueue.toml (read from main, never the branch) are what the queue runs, in the
    task's sandboxed worktree with its port: a task that breaks one never lands; the other lands."""
    services.projects.create("Declared", max_concurrent_agents=2)
    services.projects.edit("declared", merge_retries=0)
    services.repos.add("declared", "init", name="decl")
    repo = Path(services.repos.get("decl").checkout_path)
    commit_file(repo, "shared.txt", "BEGIN\nEND\n", "the region")
    commit_file(repo, "check.py", CHECK, "the check")
    commit_file(repo, ".agentqueue.toml", '[[checks]]\nname = "region"\ncommand = "test -n \\"$AGENTQUEUE_TASK_PORT\\" '
                f'&& {shlex.join([sys.executable, "check.py"])}"\n', "declare the check")
    for n in range(2):
        services.agents.create(f"decl-{n}", "command", command=AGENT_COMMAND)
    good = services.tasks.create("declared", "Good", "LINE fine", repo_id="decl")
    bad = services.tasks.create("declared", "Bad", "LINE BAD line\nSLEEP 0.5", repo_id="decl")
    engine = make_engine(services)
    await run_until_final(services, engine, good.id, bad.id, timeout=90)
    assert status(services, good.id) == "COMPLETED"
    assert status(services, bad.id) == "BLOCKED"
    assert "BAD" not in git(repo, "show", "main:shared.txt")
    assert "fine" in git(repo, "show", "main:shared.txt")
    assert "[check region] $ test -n" in engine.log_path(good.id).read_text()
    assert events(services, good.id, "merge_queue.entered")  # it went through the queue, not the fast path


async def test_a_tasks_broken_work_in_progress_commit_never_lands_on_mains_first_parent_line(
        svc: Services, tmp_path: Path) -> None:
    """The agent commits a broken step, then its fix: the queue lands one commit with the checked tree, so every
    first-parent commit of main passes the check; the broken step stays on the side (the task's own history)."""
    script = ("printf 'BEGIN\\nBAD work in progress\\nEND\\n' > shared.txt && git add shared.txt && "
              "git -c user.name=Agent -c user.email=agent@example.com commit -q -m 'wip (broken)' && "
              "printf 'BEGIN\\nfinished\\nEND\\n' > shared.txt && git add shared.txt && "
              "git -c user.name=Agent -c user.email=agent@example.com commit -q -m 'finished'")
    svc.agents.create("stepper", "command", command=shlex.join(["/bin/sh", "-c", script]))
    task = svc.tasks.create("demo", "Two steps", "work in two commits", repo_id="app")
    await run_until_final(svc, make_engine(svc), task.id, timeout=60)
    assert status(svc, task.id) == "COMPLETED"
    repo = checkout(svc)
    command = svc.projects.get("demo").verify_command
    assert command
    line = first_parents(repo)
    assert all(check_passes(repo, commit, command, tmp_path) for commit in line)
    wip = git(repo, "log", "--format=%H", "--grep=wip (broken)", "main")
    assert wip and wip not in line  # in main's history, on the side
    assert git(repo, "show", "main:shared.txt").splitlines() == ["BEGIN", "finished", "END"]
