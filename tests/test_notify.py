"""Notifications when a person is needed (design.md "Notifications"): the real notifier thread, the real store
and real Apprise, posting to a loopback HTTP receiver through its `json://` URL.

The engine runs `command` agents (tests/test_engine_lifecycle.py's AGENT) for the approval, blocked and failed
messages; quiet hours are tested with the notifier's local clock set by the test (the only thing not real).
"""

from __future__ import annotations

import re

import threading
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from agentqueue import paths, settings
from agentqueue.notify.config import NotifyConfig
from agentqueue.notify.follower import Notifier, send_test
from agentqueue.notify.messages import TaskFacts, compose
from agentqueue.notify.outbox import target_of
from agentqueue.services import Services

from .notify_receiver import Receiver, closed_port_url
from .processes import wait_for
from .test_engine_lifecycle import AGENT_COMMAND, engine_running, make_engine, status
from .git_fixtures import git_env  # noqa: F401  (fixture)

pytestmark = pytest.mark.anyio

HOSTILE = "\x1b]52;c;ZXZpbA==\x07@everyone <!channel> look\x1b[2J here\u202e\x9b31m @here " + "x" * 400
# What a task title may hold (no control characters: create_task refuses them) that a chat app would still obey.
TITLE = "@everyone <!channel> <@U0123> urgent \u202efix @here " + "x" * 150


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    yield found
    found.stop()


def configured(home: Path, urls: list[str], extra: str = "") -> Services:
    """Services for `home` with `[notify] urls` (and `extra` lines) in its config.toml."""
    paths.private_dir(home)
    listed = ", ".join(f'"{u}"' for u in urls)
    (home / "config.toml").write_text(f"[notify]\nurls = [{listed}]\n{extra}")
    return Services(home)


# -- [notify] settings -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, named, fix", [
    ('urls = "not a url"', "[notify] urls", "Apprise URLs"),
    ('urls = [1]', "[notify] urls", "json://"),
    ('blocked = "sometimes"', "[notify] blocked", '"on", "off" or "digest"'),
    ('quiet_hours = "late"', "[notify] quiet_hours", '"22:00-07:00"'),
    ('quiet_hours = "22:00-22:00"', "[notify] quiet_hours", "same time"),
    ('digest_interval = "2s"', "[notify] digest_interval", '"30m"'),
    ('board_url = "box.lan"', "[notify] board_url", "http(s)://host:port"),
    ('nonsense = 1', "unknown key(s) nonsense in [notify]", "Known keys"),
    ('[notify.projects.web]\nfrequency = "on"', 'projects."web"', "a project may set"),
    ('[notify.projects.web]\nfailed = "loud"', 'projects."web" failed', '"on", "off" or "digest"'),
])
def test_a_bad_notify_setting_is_one_sentence_naming_the_key_and_the_fix(tmp_path: Path, text: str, named: str,
                                                                           fix: str) -> None:
    (tmp_path / "config.toml").write_text(f"[notify]\n{text}\n")
    with pytest.raises(settings.ConfigError) as refused:
        settings.load(tmp_path, environ={})
    said = str(refused.value)
    assert named in said and fix in said, said
    assert said.count("\n") == 0


def test_per_project_overrides_and_modes(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text(
        '[notify]\nurls = ["json://127.0.0.1:1/a"]\ncompleted = "digest"\nquiet_hours = "22:30-06:15"\n'
        'digest_interval = "30m"\n[notify.projects."Web App"]\nurls = ["ntfy://ntfy.sh/web"]\nblocked = "off"\n'
        '[notify.projects.docs]\npermission = "digest"\n')
    config = NotifyConfig.from_values(settings.load(tmp_path, environ={}).notify)
    web = config.route("web-app", "Web App")  # by name
    assert web.urls == ("ntfy://ntfy.sh/web",) and web.mode("blocked") == "off" and web.mode("completed") == "digest"
    docs = config.route("docs", "Documentation")  # by id; no urls of its own: the global ones
    assert docs.urls == ("json://127.0.0.1:1/a",) and docs.mode("permission") == "digest"
    other = config.route("other", None)
    assert other.mode("permission") == "on" and other.mode("completed") == "digest"
    assert config.digest_seconds == 1800 and str(config.quiet) == "22:30-06:15"
    assert config.quiet.holds(23 * 60) and config.quiet.holds(6 * 60) and not config.quiet.holds(7 * 60)
    assert NotifyConfig().route("x").mode("permission") == "off"  # no URL, nobody told
    masked = [r["value"] for r in settings.describe(settings.load(tmp_path, environ={})) if r["key"] == "notify.urls"]
    assert masked == ["json://127.0.0.1:1/••••"]
    assert settings.mask_url("tgram://123456:SECRETTOKEN/chat") == "tgram://••••/••••"


def test_an_attackers_text_cannot_page_a_channel_or_escape() -> None:
    task = TaskFacts("t-1", HOSTILE, "<@U123> proj", next_step=HOSTILE)
    event = {"payload": {"request_id": "req-1", "action": f"Bash({HOSTILE})", "message": HOSTILE}}
    for kind in ("permission", "approval", "blocked", "failed", "completed"):
        message = compose(kind, event, task)
        for text in (message.title, message.body):
            assert "\x1b" not in text and "\x07" not in text and "\x9b" not in text and "\u202e" not in text
            assert "@everyone" not in text and "@here" not in text and "<!channel>" not in text
            assert "<@" not in text
            assert len(text) <= 1500
        assert "t-1" in message.body and "Do:" in message.body
    parked = compose("parked", {"payload": {"agent_type": "claude-code", "reason": "auth", "until": None,
                                            "message": HOSTILE, "fix": "claude /login"}}, None)
    assert "@everyone" not in parked.body and "claude /login" in parked.body


# -- the notifier on a real store -----------------------------------------------------------------------------
def add_event(services: Services, kind: str, task_id: str | None = None, **payload: object) -> None:
    project = services.store.scalar("SELECT project_id FROM tasks WHERE id = ?", (task_id,)) if task_id else None
    with services.store.transaction():
        services.store.add_event(kind, project_id=project, task_id=task_id, payload=payload)


async def test_the_queue_parked_event_arrives_with_its_fix(home: Path, receiver: Receiver) -> None:
    svc = configured(home, [receiver.url])
    notifier = Notifier(svc.store, svc.settings, poll_seconds=0.05)
    try:
        assert notifier.start()
        # Written through the store as the engine writes it (the login and quota slice emits it).
        add_event(svc, "queue.parked", agent_type="claude-code", reason="rate_limit", until="2026-01-01T15:00:00Z",
                  message="429 Too Many Requests", fix="nothing: it resumes by itself at 15:00")
        await wait_for(lambda: receiver.messages, 30, "the parked message")
    finally:
        notifier.stop()
        svc.close()
    (text,) = receiver.texts()
    assert "claude-code" in text and "2026-01-01T15:00:00Z" in text and "rate limit" in text
    assert "Do: nothing: it resumes by itself at 15:00" in text


async def test_quiet_hours_hold_messages_then_send_one_digest(home: Path, receiver: Receiver) -> None:
    svc = configured(home, [receiver.url], 'quiet_hours = "22:00-07:00"\n')
    svc.projects.create("Demo")
    tasks = [svc.tasks.create("demo", title, "SAY hi") for title in ("First", "Second", TITLE)]
    clock = [datetime(2026, 1, 1, 23, 30).astimezone()]
    notifier = Notifier(svc.store, svc.settings, local_clock=lambda: clock[0])
    try:
        notifier.step()  # its place in the events: nothing before it is announced
        add_event(svc, "task.awaiting_approval", tasks[0].id, **{"from": "VERIFYING", "reason": "requires_approval"})
        add_event(svc, "task.blocked", tasks[1].id, **{"from": "IN_PROGRESS", "reason": "stopped",
                                                       "message": "stopped by a person"})
        add_event(svc, "task.blocked", tasks[2].id, **{"from": "FAILED", "reason": "max_retries",
                                                       "message": HOSTILE})
        notifier.step()
        notifier.step()
        assert receiver.attempts == 0  # held: it is 23:30
        held = svc.store.all("SELECT kind, mode, status FROM notifications ORDER BY id")
        assert held == [{"kind": k, "mode": "held", "status": "pending"} for k in ("approval", "blocked", "failed")]
        clock[0] = datetime(2026, 1, 2, 7, 1).astimezone()
        notifier.step()
    finally:
        svc.close()
    assert receiver.attempts == 1
    (text,) = receiver.texts()
    assert "3 update(s) held during quiet hours" in text
    assert f"agentqueue approve {tasks[0].id}" in text and tasks[1].id in text and tasks[2].id in text
    assert "failed after its retries" in text and "@everyone" not in text and "\x1b" not in text


async def test_completions_go_out_as_a_digest_per_interval(home: Path, receiver: Receiver) -> None:
    svc = configured(home, [receiver.url], 'completed = "digest"\ndigest_interval = "10s"\n')
    svc.projects.create("Demo")
    done = [svc.tasks.create("demo", f"Task {n}", "SAY hi") for n in range(2)]
    notifier = Notifier(svc.store, svc.settings)
    try:
        notifier.step()
        for task in done:
            add_event(svc, "task.completed", task.id, **{"from": "VERIFYING", "reason": "merged"})
        notifier.step()
        assert receiver.attempts == 0  # the interval has not passed
        with svc.store.transaction() as db:  # as if the rows had waited the interval
            db.execute("UPDATE notifications SET created_at = '2020-01-01T00:00:00.000Z'")
        notifier.step()
    finally:
        svc.close()
    (text,) = receiver.texts()
    assert "2 update(s) since the last digest" in text and done[0].id in text and done[1].id in text


@pytest.mark.parametrize("store_backend", ["sqlite", "postgres"])
async def test_each_message_is_sent_by_one_daemon_only(home: Path, receiver: Receiver, store_backend: str) -> None:
    """Team mode: several notifiers (one per daemon) follow the same events; each row is claimed, and sent, once."""
    svc = configured(home, [receiver.url])
    assert svc.store.shared == (store_backend == "postgres")
    svc.projects.create("Demo")
    task = svc.tasks.create("demo", "Shared", "SAY hi")
    # Each daemon has its own connection to the database (on PostgreSQL, a store of its own).
    stores = [svc.store] + [Services(home).store for _ in range(2)]
    notifiers = [Notifier(store, svc.settings, owner=f"daemon-{n}") for n, store in enumerate(stores)]
    try:
        for notifier in notifiers:
            notifier.step()
        for _ in range(5):
            add_event(svc, "task.awaiting_approval", task.id, **{"from": "VERIFYING"})
        threads = [threading.Thread(target=n.step) for n in notifiers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        rows = svc.store.all("SELECT status, claimed_by FROM notifications")
    finally:
        for store in stores:
            store.close()
    assert len(rows) == 5 and {r["status"] for r in rows} == {"sent"}
    assert receiver.attempts == 5


async def test_notify_test_reports_each_url(home: Path, receiver: Receiver) -> None:
    dead = closed_port_url()
    svc = configured(home, [receiver.url, dead, "tgram://123456:SECRET/chat"])
    try:
        results = send_test(svc.store, svc.settings)
        states = {r["target"]: r for r in svc.store.all("SELECT * FROM notify_targets")}
    finally:
        svc.close()
    assert [r["ok"] for r in results] == [True, False, False]
    assert "SECRET" not in str(results) and results[2]["url"] == "tgram://••••/••••"
    assert "Connection error" in results[1]["error"]
    assert receiver.texts() == ["AgentQueue: test notification\nThis is a test from AgentQueue (agentqueue notify "
                                "test). Nothing needs doing."]
    assert states[target_of(receiver.url)]["last_ok_at"] and states[target_of(dead)]["last_error"]


# -- with the engine --------------------------------------------------------------------------------------------
@pytest.fixture
def engine_home(home: Path, git_env: Path, receiver: Receiver) -> Iterator[Services]:  # noqa: F811
    svc = configured(home, [receiver.url], 'board_url = "http://box.lan:8765"\n')
    svc.projects.create("Demo")
    svc.repos.add("demo", "init", name="app")
    svc.agents.create("worker", "command", command=AGENT_COMMAND)
    yield svc
    svc.close()


async def test_approval_blocked_and_failed_arrive(engine_home: Services, receiver: Receiver) -> None:
    svc = engine_home
    approval = svc.tasks.create("demo", "Needs a look", "WRITE out.txt hi", requires_approval=True)
    failing = svc.tasks.create("demo", TITLE, "EXIT 3", max_retries=1)
    slow = svc.tasks.create("demo", "Long one", "SLEEP 60")
    engine = make_engine(svc)
    async with engine_running(engine):
        await wait_for(lambda: status(svc, slow.id) == "IN_PROGRESS", 30, "the slow run to start")
        svc.tasks.stop(slow.id)  # a person stops it: BLOCKED
        await wait_for(lambda: len(receiver.messages) >= 3, 30, "three messages")
    texts = receiver.texts()
    assert status(svc, approval.id) == "AWAITING_APPROVAL" and status(svc, failing.id) == "BLOCKED"
    approved = [t for t in texts if approval.id in t]
    assert len(approved) == 1 and f"Do: agentqueue approve {approval.id}" in approved[0]
    assert f"http://box.lan:8765/tasks/{approval.id}" in approved[0]
    (failed,) = [t for t in texts if failing.id in t]
    assert "failed after its retries" in failed and "Do:" in failed
    assert "@everyone" not in failed and "<!channel>" not in failed and "<@" not in failed and "\u202e" not in failed
    (blocked,) = [t for t in texts if slow.id in t]
    assert "is blocked" in blocked and "Do:" in blocked
    # A person reads these away from their client: the terminal's commands, never a tool's name (issue 35.8).
    for text in (failed, blocked):
        assert not re.search(r"\b(restart_task|skip_task|get_task|stop_task|delete_task)\b", text), text
    assert f"agentqueue restart {slow.id}" in blocked, blocked
    # The failing task's first failure was retried: told once, after its retries were spent.
    assert len(texts) == 3


async def test_a_dead_receiver_is_retried_and_never_holds_up_a_run(engine_home: Services,
                                                                    receiver: Receiver) -> None:
    svc = engine_home
    receiver.hold()  # the service hangs: every post waits
    first = svc.tasks.create("demo", "First", "WRITE a.txt a", requires_approval=True)
    engine = make_engine(svc)
    engine.notifier.retry_base = 0.2
    async with engine_running(engine):
        await wait_for(lambda: status(svc, first.id) == "AWAITING_APPROVAL", 30, "the first run to end")
        await wait_for(lambda: receiver.attempts == 0 and svc.store.scalar(
            "SELECT count(*) FROM notifications") == 1, 10, "its message to be queued")
        # While the notifier waits on the hung service, the next run goes from start to end all the same.
        second = svc.tasks.create("demo", "Second", "WRITE b.txt b")
        await wait_for(lambda: status(svc, second.id) == "COMPLETED", 30, "the second run to end")
        assert receiver.messages == []
        receiver.status = 500
        receiver.release()  # now it answers, with errors
        await wait_for(lambda: receiver.attempts >= 3, 30, "retries")
        state = svc.store.one("SELECT * FROM notify_targets")
        assert state["last_error"] and "500" in state["last_error"] and state["last_ok_at"] is None
        assert state["shown"] == f"json://127.0.0.1:{receiver.port}/••••"
        receiver.status = 200
        await wait_for(lambda: receiver.messages, 30, "the message once the service is back")
    (text,) = receiver.texts()
    assert first.id in text
    row = svc.store.one("SELECT status, attempts FROM notifications")
    assert row["status"] == "sent" and row["attempts"] >= 2


async def test_the_notify_test_tool_answers_with_each_result_or_says_how_to_set_one_up(
        home: Path, receiver: Receiver, tmp_path: Path) -> None:
    from mcp import Client

    from agentqueue.server.app import build_server

    from .conftest import EVERY_TOOL, fail, ok

    svc = configured(home, [receiver.url])
    try:
        async with Client(build_server(svc, EVERY_TOOL)) as client:
            answer = await ok(client, "notify_test")
    finally:
        svc.close()
    assert answer == {"results": [{"url": f"json://127.0.0.1:{receiver.port}/••••", "ok": True, "error": None}]}
    bare = Services(tmp_path / "bare")
    try:
        async with Client(build_server(bare, EVERY_TOOL)) as client:
            said = await fail(client, "notify_test")
    finally:
        bare.close()
    assert "No notifier is configured" in said and "[notify] urls" in said


async def test_a_request_answered_before_anyone_was_told_is_not_announced(home: Path, receiver: Receiver) -> None:
    svc = configured(home, [receiver.url])
    svc.projects.create("Demo")
    task = svc.tasks.create("demo", "Asks twice", "SAY hi")
    notifier = Notifier(svc.store, svc.settings)
    try:
        notifier.step()
        opened = [svc.requests.open(task.id, None, "Bash", {"command": c}, f"Bash({c})", None, None, 60)
                  for c in ("npm install", "curl example.com")]
        svc.requests.answer(opened[0].id, "deny")  # answered on the board before the notifier's pass
        notifier.step()
    finally:
        svc.close()
    (text,) = receiver.texts()
    assert f"agentqueue allow {opened[1].id}" in text and "Bash(curl example.com)" in text
    assert opened[0].id not in text


async def test_urls_added_to_a_running_daemons_config_apply_without_a_restart(home: Path, receiver: Receiver) -> None:
    from agentqueue.settings_reload import Reloader

    paths.private_dir(home)
    svc = Services(home)  # no [notify] yet: nobody is told
    svc.projects.create("Demo")
    task = svc.tasks.create("demo", "Later", "SAY hi")
    engine = make_engine(svc)
    reloader = Reloader(home, svc.settings, engine.apply_settings, every=1)
    try:
        assert engine.notifier._thread is None
        (home / "config.toml").write_text(f'[notify]\nurls = ["{receiver.url}"]\n')
        assert reloader.check()  # what the daemon's reload loop does every second
        add_event(svc, "task.awaiting_approval", task.id, **{"from": "VERIFYING"})
        await wait_for(lambda: receiver.messages, 30, "the message")
    finally:
        engine.notifier.stop()
        svc.close()
    assert f"agentqueue approve {task.id}" in receiver.texts()[0]
