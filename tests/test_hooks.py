"""Hooks (issue 5): the six tools, each trigger kind really firing, context steps, templates, short-circuits,
cooldown, concurrency, overlap, a paused orchestrator and surviving a restart.

Everything is real: SQLite on disk, subprocesses for shell steps and `command` agents, an HTTP server on
loopback, git repositories. Time-dependent rules (cron, restart) use the runner's injectable clock; the
periodic trigger runs on the real clock inside a real Engine. The `llm` action through the real `claude`
CLI lives in test_hook_llm_claude.py.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, UTC
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import anyio
import pytest

from agentqueue.engine.hook_runner import HookRunner, parse_iso
from agentqueue.engine.orchestrator import Engine, EngineConfig
from agentqueue.engine.watchdog import WatchdogLimits
from agentqueue.services import Services
from agentqueue.services.errors import ServiceError
from agentqueue.store.models import Hook, Task

from .processes import wait_for
from .conftest import db_snapshot, fail, ok
from .slowdown import scaled

pytestmark = pytest.mark.anyio

TEMPLATE = {"title": "Follow-up", "description": "made by a hook"}
EVENT_TRIGGER = {"type": "event", "event_type": "task.completed"}
GIT_ID = ("-c", "user.name=Hook Test", "-c", "user.email=hooks@example.test")


# -- helpers ---------------------------------------------------------------------------------------------
@pytest.fixture
def svc(services: Services, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Services:
    """Project 'web' (the hooks' project) and 'other'; git sees no user/system config."""
    (tmp_path / "user-home").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "user-home"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    services.projects.create("Web")
    services.projects.create("Other")
    return services


def add_hook(services: Services, name: str, trigger: dict | None = None, **fields) -> Hook:
    fields.setdefault("action", "create_task")
    if fields["action"] == "create_task":
        fields.setdefault("task_template", TEMPLATE)
    return services.hooks.create(fields.pop("project_id", "web"), name, trigger or EVENT_TRIGGER, **fields)


def runs(services: Services, hook_id: str) -> list:
    return services.hooks.runs(hook_id, 100)


def detail(services: Services, run_id: str) -> dict:
    return services.hooks.run_detail(run_id)


def created_task(services: Services, run_id: str) -> Task:
    """The task a completed create_task run made (its record says `created task <id>`)."""
    row = detail(services, run_id)
    assert row["status"] == "completed", row
    found = re.fullmatch(r"created task (\S+)", row["llm_response"] or "")
    assert found, row["llm_response"]
    return services.tasks.get(found[1])


async def fire(services: Services, hook_id: str) -> tuple[str, str]:
    """fire_hook's path with no engine loop: the run goes inline and its final status comes back."""
    return await HookRunner(services, services.home, listen=False).fire(hook_id)



class Clock:
    """The runner's injectable clock."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def make_engine(services: Services) -> Engine:
    config = EngineConfig(poll_seconds=0.1, limits=WatchdogLimits(stall_seconds=scaled(30), timeout_seconds=scaled(60)))
    return Engine(services, services.home, config=config)


async def run_engine_until(engine: Engine, condition: Callable[[], object], timeout: float, what: str) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(engine.run)
        try:
            await wait_for(condition, timeout, what)
        finally:
            with anyio.CancelScope(shield=True):
                await engine.shutdown(grace=10)
            tg.cancel_scope.cancel()


class Handler(BaseHTTPRequestHandler):
    routes = {"/ok": (200, "  pong from loopback  \n"), "/empty": (200, ""), "/broken": (500, "boom")}

    def do_GET(self) -> None:  # noqa: N802
        code, body = self.routes.get(self.path, (404, "no such page"))
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def http_base() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# -- 1. the tools ------------------------------------------------------------------------------------------
async def test_hook_tools_success_paths(client, services: Services) -> None:
    await ok(client, "create_project", name="Web")
    await ok(client, "create_project", name="Other")
    made = await ok(client, "create_hook", name="Nightly check", project_id="web",
                    trigger={"type": "cron", "cron": "0 6 * * *"}, action="create_task",
                    task_template={"title": "Check {{project_id}}", "description": "{{step_0}}"},
                    context_steps=[{"type": "shell", "command": "echo nightly"}], cooldown_seconds=60)
    assert made["id"] == "nightly-check" and made["project_id"] == "web" and made["enabled"] is True
    assert made["trigger"] == {"type": "cron", "cron": "0 6 * * *"} and made["cooldown_seconds"] == 60
    assert made["context_steps"] == [{"type": "shell", "command": "echo nightly"}] and made["last_fired_at"] is None
    llm = await ok(client, "create_hook", name="Reviewer", project_id="other", trigger=EVENT_TRIGGER,
                   prompt_template="Review {{event.task_id}}")
    assert (llm["action"] == "llm" and llm["cooldown_seconds"] == 3600
            and llm["prompt_template"] == "Review {{event.task_id}}")

    assert [h["id"] for h in (await ok(client, "list_hooks", project_id="web"))["hooks"]] == ["nightly-check"]
    assert {h["id"] for h in (await ok(client, "list_hooks"))["hooks"]} == {"nightly-check", "reviewer"}
    await ok(client, "set_active_project", project_id="other")
    assert [h["id"] for h in (await ok(client, "list_hooks"))["hooks"]] == ["reviewer"]

    edited = await ok(client, "edit_hook", hook_id="nightly-check",
                      trigger={"type": "periodic", "interval_seconds": 90}, enabled=False, cooldown_seconds=0)
    assert edited["trigger"] == {"type": "periodic", "interval_seconds": 90} and edited["enabled"] is False
    assert edited["cooldown_seconds"] == 0 and edited["task_template"]["title"] == "Check {{project_id}}"
    assert services.hooks.get("nightly-check").trigger["type"] == "periodic"

    assert (await ok(client, "list_hook_runs", hook_id="nightly-check")) == {"hook_id": "nightly-check", "runs": []}
    fired = await ok(client, "fire_hook", hook_id="nightly-check")  # a disabled hook can still be fired by hand
    assert fired["hook_id"] == "nightly-check" and fired["status"] == "completed"
    listed = (await ok(client, "list_hook_runs", hook_id="nightly-check"))["runs"]
    assert len(listed) == 1 and listed[0]["id"] == fired["run_id"]
    assert listed[0]["trigger_reason"] == "manual" and listed[0]["status"] == "completed"
    assert listed[0]["tokens_used"] == 0 and listed[0]["completed_at"] >= listed[0]["started_at"]
    task = created_task(services, fired["run_id"])
    assert task.title == "Check web" and task.description == "nightly" and task.project_id == "web"
    assert services.hooks.get("nightly-check").last_fired_at is not None

    assert await ok(client, "delete_hook", hook_id="nightly-check") == {"deleted": "nightly-check"}
    assert [h["id"] for h in (await ok(client, "list_hooks", project_id="web"))["hooks"]] == []
    assert services.store.scalar("SELECT count(*) FROM hook_runs WHERE hook_id = 'nightly-check'") == 0
    kinds = [e.event_type for e in services.events.recent(100)]
    assert {"hook.created", "hook.updated", "hook.completed", "hook.deleted"} <= set(kinds)


BAD_CREATES = [
    ({"trigger": {"type": "weekly"}}, ["trigger", "periodic", "cron", "event"]),
    ({"trigger": "every day"}, ["trigger", "dictionary"]),
    ({"trigger": {"type": "periodic", "interval_seconds": 0}}, ["interval_seconds"]),
    ({"trigger": {"type": "periodic"}}, ["interval_seconds"]),
    ({"trigger": {"type": "cron", "cron": "61 * * * *"}}, ["61 * * * *", "cron"]),
    ({"trigger": {"type": "cron", "cron": "61 * * *"}}, ["61 * * *", "5-field"]),
    ({"trigger": {"type": "cron", "cron": "0 6 * *"}}, ["0 6 * *", "5-field"]),
    ({"trigger": {"type": "event"}}, ["event_type"]),
    ({"trigger": {"type": "event", "event_type": "  "}}, ["event_type"]),
    ({"trigger": {"type": "event", "event_type": "task.completed", "filter": "web"}}, ["filter"]),
    ({"context_steps": [{"type": "ftp", "url": "ftp://x"}]}, ["ftp", "shell", "git_diff"]),
    ({"context_steps": [{"type": "shell"}]}, ["command"]),
    ({"context_steps": [{"type": "db_query", "query": "SELECT * FROM tasks"}]}, ["named", "recent_task_results"]),
    ({"context_steps": [{"type": "db_query", "query": "DROP TABLE tasks"}]}, ["named"]),
    ({"context_steps": [{"type": "http", "url": "file:///etc/passwd"}]}, ["http://"]),
    ({"task_template": None}, ["task_template"]),
    ({"task_template": {"title": "only a title"}}, ["task_template", "description"]),
    ({"action": "llm", "task_template": None}, ["prompt_template"]),
    ({"action": "llm", "prompt_template": "   "}, ["prompt_template"]),
    ({"cooldown_seconds": -1}, ["cooldown_seconds"]),
    ({"project_id": "nope"}, ["nope", "not found"]),
    ({"name": "!!!"}, ["name"]),
]


async def test_create_hook_bad_input_is_refused_and_changes_nothing(client, services: Services) -> None:
    services.projects.create("Web")
    base = {"name": "Bad hook", "project_id": "web", "trigger": EVENT_TRIGGER, "action": "create_task",
            "task_template": TEMPLATE}
    for change, needles in BAD_CREATES:
        args = {k: v for k, v in (base | change).items() if v is not None}
        before = db_snapshot(services)
        text = await fail(client, "create_hook", **args)
        assert db_snapshot(services) == before, f"refused create_hook({change}) changed the database"
        assert "internal error" not in text.lower() and len(text.split(":", 1)[-1].strip()) > 15, text
        for needle in needles:
            assert needle.lower() in text.lower(), f"{needle!r} not in {text!r}"
    assert services.hooks.list() == []


async def test_hook_tools_refuse_unknown_ids_bad_edits_and_duplicates(client, services: Services) -> None:
    services.projects.create("Web")
    await ok(client, "create_hook", name="Follow up", project_id="web", trigger=EVENT_TRIGGER,
             action="create_task", task_template=TEMPLATE)

    async def refused(tool: str, needles: list[str], **args) -> None:
        before = db_snapshot(services)
        text = await fail(client, tool, **args)
        assert db_snapshot(services) == before, f"{tool} changed the database although it was refused"
        assert "internal error" not in text.lower(), text
        for needle in needles:
            assert needle.lower() in text.lower(), f"{needle!r} not in {text!r}"

    for tool in ("edit_hook", "delete_hook", "list_hook_runs", "fire_hook"):
        extra = {"enabled": False} if tool == "edit_hook" else {}
        await refused(tool, ["ghost", "not found", "list_hooks"], hook_id="ghost", **extra)
    await refused("create_hook", ["follow-up", "already exists"], name="Follow up", project_id="web",
                  trigger=EVENT_TRIGGER, action="create_task", task_template=TEMPLATE)
    await refused("create_hook", ["follow-up", "already exists"], name="follow-UP!", project_id="web",
                  trigger=EVENT_TRIGGER, action="create_task", task_template=TEMPLATE)
    await refused("edit_hook", ["nothing to change"], hook_id="follow-up")
    await refused("edit_hook", ["61 * * *"], hook_id="follow-up", trigger={"type": "cron", "cron": "61 * * *"})
    await refused("edit_hook", ["interval_seconds"], hook_id="follow-up",
                  trigger={"type": "periodic", "interval_seconds": 0})
    await refused("edit_hook", ["event_type"], hook_id="follow-up", trigger={"type": "event"})
    await refused("edit_hook", ["prompt_template"], hook_id="follow-up", action="llm")
    await refused("edit_hook", ["named"], hook_id="follow-up", context_steps=[{"type": "db_query", "query": "x"}])
    await refused("edit_hook", ["cooldown_seconds"], hook_id="follow-up", cooldown_seconds=-5)
    await refused("edit_hook", ["name"], hook_id="follow-up", name="  ")
    await refused("list_hook_runs", ["limit"], hook_id="follow-up", limit=0)
    await refused("list_hooks", ["nope", "not found"], project_id="nope")
    assert services.hooks.get("follow-up").trigger == EVENT_TRIGGER


# -- 2. each trigger kind fires ---------------------------------------------------------------------------
async def test_periodic_hook_fires_within_seconds_in_a_real_engine(svc: Services) -> None:
    add_hook(svc, "Heartbeat", {"type": "periodic", "interval_seconds": 1}, cooldown_seconds=0,
             task_template={"title": "Beat of {{project_id}}", "description": "periodic"})
    engine = make_engine(svc)
    await run_engine_until(engine, lambda: any(r.status == "completed" for r in runs(svc, "heartbeat")), 6,
                           "the periodic hook to fire")
    done = [r for r in runs(svc, "heartbeat") if r.status == "completed"]
    assert all(r.trigger_reason == "periodic" for r in done)
    task = created_task(svc, done[-1].id)
    assert task.title == "Beat of web" and task.description == "periodic"


async def test_cron_hook_with_an_injected_clock_fires_at_its_slot_and_missed_slots_run_once(svc: Services) -> None:
    hook = add_hook(svc, "Morning", {"type": "cron", "cron": "0 6 * * *"},
                    task_template={"title": "Morning run", "description": "at {{project_id}}"})
    created = parse_iso(hook.created_at)
    slot = created.replace(hour=6, minute=0, second=0, microsecond=0)
    if slot <= created:
        slot += timedelta(days=1)  # the first 06:00 after the hook exists
    clock = Clock(slot - timedelta(minutes=1))
    runner = HookRunner(svc, svc.home, clock=clock, listen=False)

    assert runner.pending(clock.now) == []
    clock.now = slot
    due = runner.pending(clock.now)
    assert [(h.id, reason, event) for h, reason, event in due] == [("morning", "cron", None)]
    run_id = runner.begin(due[0][0], "cron", None)
    assert await runner.execute(due[0][0], run_id, None) == "completed"
    assert created_task(svc, run_id).title == "Morning run"
    assert parse_iso(svc.hooks.get("morning").last_fired_at) == slot  # the injected clock, persisted

    clock.now = slot + timedelta(minutes=30)
    assert runner.pending(clock.now) == []
    clock.now = slot + timedelta(days=1) - timedelta(seconds=1)
    assert runner.pending(clock.now) == []

    # Three days pass (three slots missed): one firing, not three.
    clock.now = slot + timedelta(days=3, hours=2)
    due = runner.pending(clock.now)
    assert [h.id for h, _, _ in due] == ["morning"]
    run_id = runner.begin(due[0][0], "cron", None)
    assert await runner.execute(due[0][0], run_id, None) == "completed"
    for later in (timedelta(seconds=1), timedelta(hours=3)):
        assert runner.pending(clock.now + later) == [], "a missed slot fired more than once"
    assert runner.pending(slot + timedelta(days=4)) != []  # the next real slot
    assert [r.trigger_reason for r in runs(svc, "morning")] == ["cron", "cron"]
    assert svc.store.scalar("SELECT count(*) FROM tasks WHERE title = 'Morning run'") == 2


async def test_event_hooks_fire_after_a_real_task_completion(svc: Services) -> None:
    svc.agents.create("noop", "command", command="true")
    add_hook(svc, "Follow up", {"type": "event", "event_type": "task.completed", "filter": {"project_id": "other"}},
             project_id="web",
             task_template={"title": "Review {{event.task_id}}: {{event.title}}",
                            "description": "after {{event.event_type}} in {{event.project_id}}"})
    add_hook(svc, "Elsewhere", {"type": "event", "event_type": "task.completed", "filter": {"project_id": "web"}},
             project_id="web")
    add_hook(svc, "Any task", {"type": "event", "event_type": "task.*", "filter": {"project_id": "other"}},
             project_id="web", task_template={"title": "Saw {{event.event_type}}", "description": "{{event}}"})
    add_hook(svc, "Failures", {"type": "event", "event_type": "task.failed"}, project_id="web")
    svc.projects.set_status("web", "PAUSED")  # the tasks hooks create wait there; only 'other' runs
    engine = make_engine(svc)
    task = svc.tasks.create("other", "  Ship it  ", "Nothing to do.")

    await run_engine_until(engine, lambda: svc.tasks.get(task.id).status == "COMPLETED"
                           and runs(svc, "follow-up") and all(r.status != "running" for r in runs(svc, "follow-up")),
                           15, "the task to complete and the follow-up hook to run")
    follow = runs(svc, "follow-up")
    assert len(follow) == 1 and follow[0].trigger_reason == "event:task.completed" and follow[0].status == "completed"
    made = created_task(svc, follow[0].id)
    assert made.title == f"Review {task.id}: Ship it" and made.description == "after task.completed in other"
    event = json.loads(detail(svc, follow[0].id)["event_data"])
    assert event["event_type"] == "task.completed" and event["task_id"] == task.id

    # Each of the task's events either ran or is recorded as skipped: one run, the rest inside its cooldown.
    every = runs(svc, "any-task")
    wild = [r for r in every if r.status == "completed"]
    assert len(wild) == 1 and wild[0].trigger_reason.startswith("event:task.")
    assert len(every) > 1 and all(r.status == "skipped" and "cooldown" in r.skipped_reason
                                  for r in every if r is not wild[0] and r.id != wild[0].id)
    wild_task = created_task(svc, wild[0].id)
    assert wild_task.title == f"Saw {wild[0].trigger_reason.removeprefix('event:')}"
    assert json.loads(wild_task.description)["task_id"] == task.id  # {{event}}: the whole event as JSON
    assert runs(svc, "elsewhere") == [], "a filter that does not match fired"
    assert runs(svc, "failures") == [], "a hook for another event type fired"


# -- 3. context steps and templates -----------------------------------------------------------------------
async def test_shell_read_file_http_steps_and_templates(svc: Services, http_base: str) -> None:
    workspace = Path(svc.projects.get("web").workspace)
    (workspace / "docs").mkdir(parents=True)
    (workspace / "docs" / "status.txt").write_text("\n  all systems nominal  \n\n")
    template = {
        "title": "Report for {{ project_id }}",
        "description": "shell=[{{step_0}}] err=[{{step_0.stderr}}] code=[{{step_0.exit_code}}]\n"
                       "file=[{{step_1}}] lines=[{{step_1.total_lines}}]\n"
                       "http=[{{step_2}}] status=[{{step_2.status_code}}] body=[{{step_2.body}}]\n"
                       "event=[{{event}}] none=[{{event.task_id}}] missing=[{{step_7}}] odd=[{{step_0.nope}}]\n"
                       "unknown=[{{not_a_placeholder}}] keep=[{{ step_x }}]",
    }
    add_hook(svc, "Report", {"type": "periodic", "interval_seconds": 3600}, task_template=template, context_steps=[
        {"type": "shell", "command": "printf '  hello from %s  \\n\\n' \"$(basename \"$PWD\")\"; echo oops >&2"},
        {"type": "read_file", "path": "docs/status.txt"},
        {"type": "http", "url": f"{http_base}/ok"},
    ])
    run_id, status = await fire(svc, "report")
    assert status == "completed"
    task = created_task(svc, run_id)
    assert task.title == "Report for web"
    lines = task.description.splitlines()
    assert lines[0] == f"shell=[hello from {workspace.name}] err=[oops] code=[0]"  # ran in the project workspace
    assert lines[1] == "file=[all systems nominal] lines=[3]"
    assert lines[2] == "http=[pong from loopback] status=[200] body=[pong from loopback]"
    assert lines[3] == "event=[{}] none=[] missing=[] odd=[]"
    assert lines[4] == "unknown=[{{not_a_placeholder}}] keep=[{{ step_x }}]"
    context = json.loads(detail(svc, run_id)["context_results"])
    assert context[0]["exit_code"] == 0 and context[0]["stdout"].startswith("  hello from")
    assert context[2]["status_code"] == 200 and "error" not in context[2]


async def test_failing_steps_record_an_error_and_the_run_goes_on(svc: Services, tmp_path: Path) -> None:
    outside = tmp_path / "secret.txt"
    outside.write_text("top secret\n")
    port = closed_port()
    add_hook(svc, "Fragile", {"type": "periodic", "interval_seconds": 3600}, context_steps=[
        {"type": "read_file", "path": str(outside)},
        {"type": "read_file", "path": "../../../secret.txt"},
        {"type": "http", "url": f"http://127.0.0.1:{port}/health", "timeout": 5},
        {"type": "shell", "command": "echo partial; exit 3"},
        {"type": "read_file", "path": "missing.txt"},
    ], task_template={"title": "Fragile ran",
                      "description": "a=[{{step_0}}] c=[{{step_2.status_code}}] "
                                     "d=[{{step_3}}/{{step_3.exit_code}}] e=[{{step_4.error}}]"})
    run_id, status = await fire(svc, "fragile")
    assert status == "completed"
    context = json.loads(detail(svc, run_id)["context_results"])
    assert len(context) == 5
    for jailed in context[:2]:
        assert jailed.get("error") and "content" not in jailed, jailed
        assert "top secret" not in json.dumps(jailed)
    assert context[2]["status_code"] == 0 and context[2]["error"] and context[2]["body"] == ""
    assert context[3] == {"stdout": "partial\n", "stderr": "", "exit_code": 3}
    assert "missing.txt" in context[4]["error"]
    task = created_task(svc, run_id)
    assert "top secret" not in task.description
    assert "c=[0] d=[partial/3] e=['missing.txt' does not exist" in task.description


async def test_db_query_steps_run_each_named_query(svc: Services) -> None:
    svc.agents.create("echo", "command", command=f"{sys.executable} -c \"print('all good')\"")
    done = svc.tasks.create("web", "Build it", "Build the thing.")
    await run_engine_until(make_engine(svc), lambda: svc.tasks.get(done.id).status == "COMPLETED", 15,
                           "the task to complete")
    svc.tasks.create("web", "Waiting one", "Stays READY.")
    svc.projects.set_status("web", "PAUSED")
    steps = [{"type": "db_query", "query": "recent_task_results"},
             {"type": "db_query", "query": "task_detail", "params": {"task_id": done.id}},
             {"type": "db_query", "query": "recent_events"},
             {"type": "db_query", "query": "hook_runs"},
             {"type": "db_query", "query": "task_counts"}]
    add_hook(svc, "Digest", {"type": "periodic", "interval_seconds": 3600}, context_steps=steps, task_template={
        "title": "Digest", "description": "results={{step_0.rows}}\ndetail={{step_1.rows}}\nevents={{step_2.count}}\n"
                                          "runs={{step_3}}\ncounts={{step_4.rows}}"})
    run_id, status = await fire(svc, "digest")
    assert status == "completed"
    lines = dict(line.split("=", 1) for line in created_task(svc, run_id).description.splitlines())
    results = json.loads(lines["results"])
    assert len(results) == 1 and results[0]["task_id"] == done.id and results[0]["status"] == "completed"
    assert "all good" in results[0]["summary"]
    detail_rows = json.loads(lines["detail"])
    assert (detail_rows[0]["id"] == done.id and detail_rows[0]["status"] == "COMPLETED"
            and detail_rows[0]["title"] == "Build it")
    assert int(lines["events"]) >= 5
    own_runs = json.loads(lines["runs"])
    assert own_runs["count"] == 1 and own_runs["rows"][0]["id"] == run_id and own_runs["rows"][0]["status"] == "running"
    counts = {row["status"]: row["count"] for row in json.loads(lines["counts"])}
    assert counts == {"COMPLETED": 1, "READY": 1}


async def test_git_diff_step_shows_uncommitted_changes(svc: Services) -> None:
    repo = svc.repos.add("web", "init", name="site")
    checkout = Path(repo.checkout_path)
    (checkout / "index.html").write_text("<h1>old</h1>\n")
    subprocess.run(["git", *GIT_ID, "add", "index.html"], cwd=checkout, check=True)
    subprocess.run(["git", *GIT_ID, "commit", "-q", "-m", "page"], cwd=checkout, check=True)
    (checkout / "index.html").write_text("<h1>new headline</h1>\n")
    add_hook(svc, "Diff", {"type": "periodic", "interval_seconds": 3600},
             context_steps=[{"type": "git_diff"}, {"type": "git_diff", "repo_id": "site"},
                            {"type": "git_diff", "repo_id": "ghost"}],
             task_template={"title": "Diff", "description": "{{step_0}}\n---\n{{step_1.diff}}\n---\n{{step_2.error}}"})
    run_id, status = await fire(svc, "diff")
    assert status == "completed"
    whole, one, ghost = created_task(svc, run_id).description.split("\n---\n")
    for text in (whole, one):
        assert text.startswith("diff --git a/index.html b/index.html")
        assert "-<h1>old</h1>" in text and "+<h1>new headline</h1>" in text
    assert "ghost" in ghost and "not found" in ghost.lower()


# -- 4. short-circuit flags ----------------------------------------------------------------------------------
@pytest.mark.parametrize("flag,skipping,proceeding,reason", [
    ("skip_llm_if_exit_zero", {"type": "shell", "command": "true"}, {"type": "shell", "command": "exit 1"},
     "exit code 0 (skip_llm_if_exit_zero)"),
    ("skip_llm_if_empty", {"type": "shell", "command": "printf '  \\n\\t\\n'"}, {"type": "shell", "command": "echo x"},
     "empty output (skip_llm_if_empty)"),
    ("skip_llm_if_status_ok", {"type": "http", "url": "/ok"}, {"type": "http", "url": "/broken"},
     "HTTP 200 (skip_llm_if_status_ok)"),
])
async def test_short_circuit_flags(svc: Services, http_base: str, flag, skipping, proceeding, reason) -> None:
    def prepare(step: dict) -> dict:
        step = dict(step, **{flag: True})
        if step["type"] == "http":
            step["url"] = http_base + step["url"]
        return step

    first = {"type": "shell", "command": "echo context"}
    for name, step in (("Skips", skipping), ("Proceeds", proceeding)):
        for action in ("create_task", "llm"):
            hook_name = f"{name} {action}"
            extra = {"prompt_template": "Look at {{step_1}}"} if action == "llm" else {}
            add_hook(svc, hook_name, {"type": "periodic", "interval_seconds": 3600}, action=action,
                     context_steps=[first, prepare(step), {"type": "shell", "command": "echo never > ran.txt"}],
                     **extra)
    svc.system.set_orchestrator("paused")  # an llm hook that proceeds stops there: no model is called

    tasks_before = svc.store.scalar("SELECT count(*) FROM tasks")
    for action in ("create_task", "llm"):
        run_id, status = await fire(svc, f"skips-{action.replace('_', '-')}")
        assert status == "skipped"
        [run] = runs(svc, f"skips-{action.replace('_', '-')}")
        assert run.status == "skipped" and run.skipped_reason == f"step_1: {reason}"
        context = json.loads(detail(svc, run_id)["context_results"])
        assert len(context) == 2, "steps after the short-circuit ran"
    assert svc.store.scalar("SELECT count(*) FROM tasks") == tasks_before
    assert not (Path(svc.projects.get("web").workspace) / "ran.txt").exists()

    run_id, status = await fire(svc, "proceeds-create-task")
    assert status == "completed" and created_task(svc, run_id).title == TEMPLATE["title"]
    assert len(json.loads(detail(svc, run_id)["context_results"])) == 3
    run_id, status = await fire(svc, "proceeds-llm")
    assert status == "skipped"
    assert runs(svc, "proceeds-llm")[0].skipped_reason.startswith("orchestrator paused")


# -- 5. cooldown and concurrency --------------------------------------------------------------------------
async def test_cooldown_lets_one_event_through_and_fire_hook_ignores_it(svc: Services) -> None:
    runner = HookRunner(svc, svc.home)  # listens to committed events, as the engine's runner does
    add_hook(svc, "Note watcher", {"type": "event", "event_type": "note.written"}, cooldown_seconds=3600,
             task_template={"title": "Read {{event.name}}", "description": "note {{event.status}}"})
    add_hook(svc, "Eager watcher", {"type": "event", "event_type": "note.written"}, cooldown_seconds=0,
             task_template={"title": "Eager {{event.name}}", "description": "{{event.status}}"})

    async def tick() -> list[str]:
        fired = []
        for hook, reason, event in runner.pending(runner.clock()):
            await runner.execute(hook, runner.begin(hook, reason, event), event)
            fired.append(hook.id)
        return sorted(fired)

    svc.notes.write("web", "Plan", "first")
    assert await tick() == ["eager-watcher", "note-watcher"]
    svc.notes.write("web", "Plan", "second")
    assert await tick() == ["eager-watcher"], "the cooldown did not hold the second event back"
    assert await tick() == []
    watched = runs(svc, "note-watcher")  # newest first: the second event is on record, skipped, and why
    assert [r.status for r in watched] == ["skipped", "completed"] and "cooldown" in watched[0].skipped_reason
    assert len(runs(svc, "eager-watcher")) == 2
    titles = [t.title for t in svc.tasks.list("web", limit=50)[0]]
    assert titles.count("Read plan.md") == 1 and titles.count("Eager plan.md") == 2

    _, status = await runner.fire("note-watcher")  # fire_hook: now, cooldown or not
    assert status == "completed"
    assert [(r.trigger_reason, r.status) for r in runs(svc, "note-watcher")] == [
        ("manual", "completed"), ("event:note.written", "skipped"), ("event:note.written", "completed")]


async def test_one_run_per_hook_at_a_time(client, services: Services) -> None:
    services.projects.create("Web")
    add_hook(services, "Slow", {"type": "event", "event_type": "note.written"}, cooldown_seconds=0,
             context_steps=[{"type": "shell", "command": "sleep 1"}])
    runner = HookRunner(services, services.home, listen=False)
    services.engine_hooks.connect(hook_runner=runner)  # as the engine does: fire_hook goes through the running runner
    async with anyio.create_task_group() as tg:
        tg.start_soon(runner.run_forever)
        await wait_for(lambda: runner._tg is not None, 5, "the hook runner to start")
        tg.start_soon(runner.fire, "slow")
        # `active` is taken before the run's row is written (in a thread): wait for the row, not the flag.
        await wait_for(lambda: "slow" in runner.active and runs(services, "slow"), 5, "the first run to start")
        before = db_snapshot(services)
        text = await fail(client, "fire_hook", hook_id="slow")
        assert "slow" in text and "already running" in text and "list_hook_runs" in text
        assert db_snapshot(services) == before
        # An event meanwhile does not start a second run of it either.
        runner._events.append({"event_type": "note.written", "project_id": "web", "payload": {}})
        assert runner.pending(runner.clock()) == []
        await wait_for(lambda: "slow" not in runner.active, 10, "the first run to end")
        fired = await ok(client, "fire_hook", hook_id="slow")  # free again
        assert fired["status"] == "completed"
        tg.cancel_scope.cancel()
    assert [r.status for r in runs(services, "slow")] == ["completed", "completed"]


@pytest.mark.slow  # seconds of real waits (timeouts, caps, periods): left out of the fast loop
async def test_global_cap_on_concurrent_hook_runs(svc: Services) -> None:
    for name in ("One", "Two", "Three"):
        add_hook(svc, name, {"type": "periodic", "interval_seconds": 1}, cooldown_seconds=0,
                 context_steps=[{"type": "shell", "command": "sleep 1.2"}])
    runner = HookRunner(svc, svc.home, max_concurrent=2, listen=False)
    seen: list[int] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(runner.run_forever)
        with anyio.move_on_after(6):
            while True:
                seen.append(len(runner.active))
                if all(any(r.status == "completed" for r in runs(svc, h)) for h in ("one", "two", "three")):
                    break
                await anyio.sleep(0.02)
        tg.cancel_scope.cancel()
    assert max(seen) == 2, f"active runs went to {max(seen)} with max_concurrent=2"
    for hook_id in ("one", "two", "three"):
        assert any(r.status == "completed" for r in runs(svc, hook_id)), f"{hook_id} never ran (starved by the cap)"


async def test_concurrent_fire_hook_calls_start_one_run(svc: Services) -> None:
    add_hook(svc, "Slow", {"type": "event", "event_type": "note.written"}, cooldown_seconds=0,
             context_steps=[{"type": "shell", "command": "sleep 0.5"}])
    runner = HookRunner(svc, svc.home, listen=False)
    outcomes: list[str] = []

    async def attempt() -> None:
        try:
            outcomes.append((await runner.fire("slow"))[1])
        except ServiceError as error:
            outcomes.append(str(error))

    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(attempt)
    assert len(outcomes) == 3 and outcomes.count("completed") == 1, outcomes
    assert all("already running" in text for text in outcomes if text != "completed"), outcomes
    assert [r.status for r in runs(svc, "slow")] == ["completed"]


async def test_an_event_held_back_by_the_cap_fires_when_a_slot_frees(svc: Services) -> None:
    add_hook(svc, "Busy", {"type": "event", "event_type": "build.finished"}, cooldown_seconds=0,
             context_steps=[{"type": "shell", "command": "sleep 1.5"}])
    add_hook(svc, "Watcher", {"type": "event", "event_type": "note.written"}, cooldown_seconds=0,
             task_template={"title": "Saw {{event.name}}", "description": "{{event}}"})
    runner = HookRunner(svc, svc.home, max_concurrent=1)
    async with anyio.create_task_group() as tg:
        tg.start_soon(runner.run_forever)
        await wait_for(lambda: runner._tg is not None, 5, "the hook runner to start")
        tg.start_soon(runner.fire, "busy")
        await wait_for(lambda: "busy" in runner.active, 5, "the busy run to start")
        svc.notes.write("web", "Idea", "an event while the only slot is taken")
        await wait_for(lambda: any(r.status == "completed" for r in runs(svc, "watcher")), 6,
                       "the held event to fire once the slot is free")
        tg.cancel_scope.cancel()
    [busy] = runs(svc, "busy")
    [watcher] = runs(svc, "watcher")
    assert busy.status == "completed" and watcher.trigger_reason == "event:note.written"
    assert watcher.started_at >= busy.completed_at, "the watcher ran beside the busy hook despite max_concurrent=1"
    assert created_task(svc, watcher.id).title == "Saw idea.md"


# -- 6. overlap ---------------------------------------------------------------------------------------------
async def test_schedule_due_while_the_previous_run_goes_is_recorded_as_skipped_once(svc: Services) -> None:
    hook = add_hook(svc, "Daily", {"type": "cron", "cron": "0 6 * * *"}, cooldown_seconds=0)
    created = parse_iso(hook.created_at)
    slot = created.replace(hour=6, minute=0, second=0, microsecond=0) + timedelta(days=1)
    clock = Clock(slot)
    runner = HookRunner(svc, svc.home, clock=clock, listen=False)
    [(due, reason, _)] = runner.pending(clock.now)
    run_id = runner.begin(due, reason, None)  # started, still going

    clock.now = slot + timedelta(days=1)
    assert runner.pending(clock.now) == []
    [skip, first] = runs(svc, "daily")
    assert first.id == run_id and first.status == "running"
    assert skip.status == "skipped" and skip.trigger_reason == "cron" and "overlap" in skip.skipped_reason
    clock.now += timedelta(seconds=1)
    assert runner.pending(clock.now) == []
    assert len(runs(svc, "daily")) == 2, "the same overlapped slot was recorded again on the next tick"

    assert await runner.execute(due, run_id, None) == "completed"
    clock.now = slot + timedelta(days=1, minutes=30)
    assert runner.pending(clock.now) == [], "the skipped slot ran after all"
    assert [h.id for h, _, _ in runner.pending(slot + timedelta(days=2))] == ["daily"]


@pytest.mark.slow  # seconds of real waits (timeouts, caps, periods): left out of the fast loop
async def test_periodic_overlap_in_the_running_loop(svc: Services) -> None:
    add_hook(svc, "Busy", {"type": "periodic", "interval_seconds": 1}, cooldown_seconds=0,
             context_steps=[{"type": "shell", "command": "sleep 1.6"}])
    runner = HookRunner(svc, svc.home, listen=False)
    async with anyio.create_task_group() as tg:
        tg.start_soon(runner.run_forever)
        await wait_for(lambda: any(r.status == "completed" for r in runs(svc, "busy")), 8, "the first run to end")
        tg.cancel_scope.cancel()
    recorded = runs(svc, "busy")
    skipped = [r for r in recorded if r.status == "skipped"]
    assert skipped and all("overlap" in r.skipped_reason and r.trigger_reason == "periodic" for r in skipped)
    assert len(skipped) <= 2, f"{len(skipped)} skips in one 1.6 s run of a 1 s hook"
    assert sum(r.status in ("completed", "running") for r in recorded) <= 2


# -- 7. paused orchestrator -------------------------------------------------------------------------------
async def test_paused_orchestrator_skips_llm_hooks_but_not_create_task_hooks(client, services: Services) -> None:
    services.projects.create("Web")
    add_hook(services, "Thinker", {"type": "event", "event_type": "note.written"},
             action="llm", prompt_template="Summarise {{step_0}}", llm_config={"agent_type": "claude-code"},
             context_steps=[{"type": "shell", "command": "echo gathered"}])
    add_hook(services, "Doer", {"type": "event", "event_type": "note.written"})
    assert (await ok(client, "orchestrator_control", action="pause"))["state"] == "paused"

    thought = await ok(client, "fire_hook", hook_id="thinker")
    assert thought["status"] == "skipped"
    [run] = (await ok(client, "list_hook_runs", hook_id="thinker"))["runs"]
    assert run["status"] == "skipped" and run["skipped_reason"].startswith("orchestrator paused")
    assert run["tokens_used"] == 0
    row = detail(services, thought["run_id"])
    assert json.loads(row["context_results"])[0]["stdout"] == "gathered\n"  # context steps still ran
    assert row["prompt_sent"] is None and services.store.scalar("SELECT count(*) FROM token_ledger") == 0

    done = await ok(client, "fire_hook", hook_id="doer")
    assert done["status"] == "completed" and created_task(services, done["run_id"]).title == TEMPLATE["title"]


# -- 8. restarts --------------------------------------------------------------------------------------------
async def test_hook_state_survives_a_restart(home: Path) -> None:
    first = Services(home)
    first.projects.create("Web")
    periodic = add_hook(first, "Hourly", {"type": "periodic", "interval_seconds": 3600}, cooldown_seconds=0)
    add_hook(first, "Morning", {"type": "cron", "cron": "0 6 * * *"}, cooldown_seconds=0)
    created = parse_iso(periodic.created_at)
    slot = created.replace(hour=6, minute=0, second=0, microsecond=0) + timedelta(days=1)
    clock = Clock(slot + timedelta(minutes=1))
    runner = HookRunner(first, home, clock=clock, listen=False)
    due = runner.pending(clock.now)
    assert sorted(h.id for h, _, _ in due) == ["hourly", "morning"]
    for hook, reason, event in due:
        assert await runner.execute(hook, runner.begin(hook, reason, event), event) == "completed"
    first.close()

    second = Services(home)  # the daemon restarted
    try:
        clock = Clock(slot + timedelta(minutes=2))
        runner = HookRunner(second, home, clock=clock, listen=False)
        assert runner.pending(clock.now) == [], "a hook fired again after a restart within its interval"
        assert parse_iso(second.hooks.get("hourly").last_fired_at) == slot + timedelta(minutes=1)
        clock.now = slot + timedelta(days=3, hours=1)  # down for days: each hook fires once
        due = runner.pending(clock.now)
        assert sorted(h.id for h, _, _ in due) == ["hourly", "morning"]
        for hook, reason, event in due:
            assert await runner.execute(hook, runner.begin(hook, reason, event), event) == "completed"
        assert runner.pending(clock.now + timedelta(seconds=1)) == []
        assert [len(runs(second, h)) for h in ("hourly", "morning")] == [2, 2]
    finally:
        second.close()


async def test_runs_left_running_by_a_dead_process_are_marked_failed(services: Services) -> None:
    services.projects.create("Web")
    add_hook(services, "Orphaned", {"type": "event", "event_type": "note.written"})
    script = (
        "import os, signal, sys\n"
        "from pathlib import Path\n"
        "from agentqueue.services import Services\n"
        "svc = Services(Path(sys.argv[1]))\n"
        "hook = svc.hooks.get('orphaned')\n"
        "print(svc.hooks.start_run(hook, 'manual', None, '2024-01-01T00:00:00.000Z'), flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(services.home)], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parent.parent, timeout=60)
    assert done.returncode == -9, done.stderr
    run_id = done.stdout.strip()
    assert [(r.id, r.status) for r in runs(services, "orphaned")] == [(run_id, "running")]

    runner = HookRunner(services, services.home, listen=False)
    async with anyio.create_task_group() as tg:
        tg.start_soon(runner.run_forever)
        await wait_for(lambda: runs(services, "orphaned")[0].status != "running", 5, "the orphaned run to be failed")
        tg.cancel_scope.cancel()
    [run] = runs(services, "orphaned")
    assert run.status == "failed" and run.completed_at and "interrupted" in run.error
    assert services.hooks.interrupted() == 0


async def test_a_hook_does_not_react_to_the_task_it_created(services: Services) -> None:
    services.projects.create("Loop")
    services.hooks.create("loop", "Echo", {"type": "event", "event_type": "task.*"}, action="create_task",
                          task_template={"title": "Echo of {{event.task_id}}", "description": "d",
                                         "requires_approval": "false"}, cooldown_seconds=0)
    runner = HookRunner(services, services.home)
    services.tasks.create("loop", "Seed", "a task made by a person")
    firings = runner.pending(datetime.now(UTC))
    assert len(firings) == 1
    hook, reason, event = firings[0]
    assert await runner.execute(hook, runner.begin(hook, reason, event), event) == "completed"
    echo = [t for t in services.tasks.list("loop")[0] if t.title.startswith("Echo of")]
    assert len(echo) == 1 and services.tasks.get(echo[0].id).requires_approval is False
    assert runner.pending(datetime.now(UTC)) == []  # its own task.created is not a new trigger
