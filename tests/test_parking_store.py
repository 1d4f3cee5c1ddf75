"""Parking in the store, on SQLite and on PostgreSQL (team mode): one event per parking, held per account, a
backoff that grows when a limit comes back, and the engine's claim pass giving a parked kind nothing."""

from __future__ import annotations

from datetime import datetime

import pytest

from agentqueue.engine.orchestrator import Engine, EngineConfig
from agentqueue.services import Services
from agentqueue.services.parking import account

from .conftest import on_both_backends

store_backend = on_both_backends()  # every test here runs on SQLite and on PostgreSQL (team mode's store)


# -- the store: one event per parking, per account, backoff ----------------------------------------------------------
def test_parking_writes_one_event_and_holds_only_the_account_it_is_about(services: Services) -> None:
    parking = services.parking
    mine, other = account("claude-code", {"ANTHROPIC_API_KEY": "a"}), account("claude-code", {"ANTHROPIC_API_KEY": "b"})
    assert mine != other and mine.startswith("key:")
    assert parking.park("claude-code", mine, "auth", "Invalid API key", check_in=30) is not None
    assert parking.park("claude-code", mine, "auth", "Invalid API key again") is None  # already parked: no event
    assert parking.held_kinds({"claude-code": mine}) == {"claude-code"}
    assert parking.held_kinds({"claude-code": other}) == frozenset()  # another key is not held by it
    events = services.events.recent(10, event_type="queue.parked")
    assert len(events) == 1 and events[0].payload["agent_type"] == "claude-code"
    assert events[0].payload["reason"] == "auth" and events[0].payload["until"] is None
    assert "ANTHROPIC_API_KEY" in events[0].payload["fix"] and "agentqueue resume" in events[0].payload["fix"]
    resumed = parking.resume("person")
    assert [r["agent_type"] for r in resumed] == ["claude-code"] and parking.parked() == []
    assert [e.payload["by"] for e in services.events.recent(10, event_type="queue.resumed")] == ["person"]
    assert parking.resume("person") == []  # nothing left: no second event


def test_a_limit_without_a_reset_time_backs_off_longer_each_time_it_comes_back(services: Services) -> None:
    parking = services.parking
    spans = []
    for _ in range(3):
        row = parking.park("codex", "key:x", "rate_limit", "429 Too Many Requests", backoff=(60, 900))
        assert row is not None
        spans.append((datetime.fromisoformat(row["until"].replace("Z", "+00:00"))
                      - datetime.fromisoformat(row["parked_at"].replace("Z", "+00:00"))).total_seconds())
        parking.resume("reset_time")
    assert [round(s) for s in spans] == [60, 120, 240]
    quota = parking.park("gemini", "key:y", "quota", "quota exceeded", backoff=(60, 900))
    assert quota is not None and "resets" in quota["fix"]


# -- the scheduler gives a parked kind nothing; get_status shows it ----------------------------------------------------
def test_the_scheduler_gives_no_task_to_a_parked_kind_and_its_tasks_stay_ready(
        services: Services, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTQUEUE_CLAUDE_BIN", "/bin/true")  # registered, never run: only claims are made here
    services.projects.create("Demo")
    services.agents.create("claude", "claude-code")
    task = services.tasks.create("demo", "Waits", "anything")
    engine = Engine(services, services.home, config=EngineConfig(poll_seconds=0.1))
    mine = engine.parking.accounts()["claude-code"]
    services.parking.park("claude-code", mine, "quota", "usage limit reached · resets 3pm (UTC)",
                          until="2099-01-01T00:00:00.000Z")
    assert engine.tick() == []
    assert services.tasks.get(task.id).status == "READY" and services.tasks.get(task.id).retry_count == 0
    status = services.system.status()
    assert [p["agent_type"] for p in status["parked"]] == ["claude-code"]
    assert status["parked"][0]["until"] == "2099-01-01T00:00:00.000Z" and status["parked"][0]["reason"] == "quota"
    assert any(w.startswith("Agent kind claude-code is parked") and "2099-01-01" in w for w in status["warnings"])
    services.parking.resume("person")
    assert engine.tick() == [(task.id, "claude")]


def test_a_login_parked_for_credentials_no_daemon_uses_any_more_is_released(services: Services) -> None:
    """The key was changed in [agent_env] and the daemon restarted: nothing would ever check the old one's parking,
    and it must not hold the new key's runs (get_status would say 'parked' forever)."""
    engine = Engine(services, services.home, config=EngineConfig(poll_seconds=0.1))
    mine = engine.parking.accounts()["claude-code"]
    services.parking.park("claude-code", "key:0123456789ab", "auth", "Invalid API key", owner="gone:1:abc")
    services.parking.park("codex", engine.parking.accounts()["codex"], "auth", "401 Unauthorized", owner="gone:1:abc")
    assert engine.parking.held() == {"codex"}  # the old claude key holds nothing here already
    assert engine.parking.release_orphans()
    assert [(r["agent_type"], r["account"]) for r in services.parking.parked()] == [
        ("codex", engine.parking.accounts()["codex"])]  # this daemon's own credentials stay parked until checked
    assert [e.payload["by"] for e in services.events.recent(10, event_type="queue.resumed")] == ["check"]
    assert mine != "key:0123456789ab"
