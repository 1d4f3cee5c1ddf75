"""The task state machine as a table: every pair is either allowed or refused with advice, and the named groups
of statuses agree with the table."""

from __future__ import annotations

import pytest

from agentqueue.services import task_states
from agentqueue.services.errors import ConflictError
from agentqueue.services.task_states import (CLAIMED, COUNTS_TOWARD_CONCURRENCY, EXPLAINED, FOLLOWABLE, HELD,
                                             NEEDS_PERSON, QUEUED, REPO_FIXED, REVIEWABLE, STARTED, STOPPABLE, TERMINAL,
                                             TRANSITIONS, WORKING, can_transition, check_transition, in_clause)
from agentqueue.services.tasks import STATUS_NAMES

ALLOWED = {
    ("DEFINED", "READY"), ("READY", "ASSIGNED"), ("ASSIGNED", "IN_PROGRESS"), ("IN_PROGRESS", "VERIFYING"),
    ("IN_PROGRESS", "FAILED"), ("IN_PROGRESS", "PAUSED"), ("IN_PROGRESS", "WAITING_INPUT"),
    ("WAITING_INPUT", "IN_PROGRESS"), ("PAUSED", "READY"), ("VERIFYING", "COMPLETED"),
    ("VERIFYING", "AWAITING_APPROVAL"), ("AWAITING_APPROVAL", "COMPLETED"), ("FAILED", "READY"),
    ("FAILED", "BLOCKED"), ("BLOCKED", "COMPLETED"), ("IN_PROGRESS", "BLOCKED"), ("COMPLETED", "READY"),
}
REFUSED = {
    ("DEFINED", "COMPLETED"), ("READY", "COMPLETED"), ("READY", "IN_PROGRESS"), ("COMPLETED", "BLOCKED"),
    ("IN_PROGRESS", "COMPLETED"), ("IN_PROGRESS", "DEFINED"), ("ASSIGNED", "COMPLETED"),
    ("IN_PROGRESS", "AWAITING_APPROVAL"),
}


@pytest.mark.parametrize(("old", "new"), sorted(ALLOWED))
def test_allowed(old: str, new: str) -> None:
    assert can_transition(old, new)
    check_transition("t", old, new)


@pytest.mark.parametrize(("old", "new"), sorted(REFUSED))
def test_refused_with_the_allowed_moves_named(old: str, new: str) -> None:
    assert not can_transition(old, new)
    with pytest.raises(ConflictError) as error:
        check_transition("swift-falcon", old, new)
    text = str(error.value)
    assert f"from {old} to {new}" in text and "set_task_status" in text
    for target in TRANSITIONS[old]:
        assert target in text


def test_every_status_is_in_the_table_and_no_self_loops() -> None:
    assert set(TRANSITIONS) == set(STATUS_NAMES)
    for status, targets in TRANSITIONS.items():
        assert status not in targets
        assert set(targets) <= set(STATUS_NAMES)


def test_running_tasks_cannot_be_restarted_and_everything_else_can() -> None:
    for status in STATUS_NAMES:
        if status in CLAIMED:
            assert TRANSITIONS[status].get("READY") != "restart"
        elif status != "READY":  # restarting a READY task only resets its retries
            assert "READY" in TRANSITIONS[status], status


def test_terminal_states_leave_only_by_admin_action() -> None:
    for status in TERMINAL:
        assert set(TRANSITIONS[status].values()) <= {"restart", "skipped"}
    assert {"IN_PROGRESS", "FAILED", "READY"} <= STOPPABLE
    assert not {"COMPLETED", "BLOCKED", "AWAITING_APPROVAL"} & STOPPABLE


# -- the groups ----------------------------------------------------------------------------------------------
GROUPS = {name: value for name, value in vars(task_states).items() if name.isupper() and isinstance(value, frozenset)}
# The moves that end a claim: the run finished (well or not), or it was stopped or recovered.
ENDS_A_RUN = {"stop", "recovered", "agent_failed", "rate_limited", "input_timeout", "verified", "verify_failed",
              "needs_approval", "sent_back"}


def test_every_group_names_real_statuses() -> None:
    assert {"CLAIMED", "WORKING", "STARTED", "COUNTS_TOWARD_CONCURRENCY", "FOLLOWABLE", "REPO_FIXED", "QUEUED", "HELD",
            "EXPLAINED", "NEEDS_PERSON", "REVIEWABLE", "STOPPABLE", "TERMINAL"} <= set(GROUPS)
    for name, group in GROUPS.items():
        assert group and group <= set(STATUS_NAMES), name


def test_a_task_becomes_claimed_only_by_a_claim():
    entries = {(old, new, event) for old, targets in TRANSITIONS.items() if old not in CLAIMED
               for new, event in targets.items() if new in CLAIMED}
    assert entries == {("READY", "ASSIGNED", "assigned")}


def test_a_claimed_task_leaves_only_when_its_run_ends():
    """Not by restart_task or a dependency edit: those would requeue a task whose agent still runs."""
    for old in CLAIMED:
        for new, event in TRANSITIONS[old].items():
            if new not in CLAIMED:
                assert event in ENDS_A_RUN, (old, new, event)


def test_every_claimed_task_can_be_stopped():
    """delete_task, restart_task and delete_project refuse a claimed task with "stop_task it first": that must work."""
    assert CLAIMED <= STOPPABLE
    for status in CLAIMED:
        assert TRANSITIONS[status]["BLOCKED"] == "stop"


def test_the_groups_that_exclude_each_other_do():
    assert not CLAIMED & HELD
    assert not QUEUED & (CLAIMED | HELD | REVIEWABLE)
    assert not CLAIMED & REVIEWABLE
    assert not CLAIMED & TERMINAL - {"BLOCKED"}
    assert WORKING | {"WAITING_INPUT"} == CLAIMED
    assert NEEDS_PERSON <= HELD <= EXPLAINED


def test_started_is_what_a_started_agent_reaches_while_claimed():
    reached, frontier = set(), ["IN_PROGRESS"]
    while frontier:
        status = frontier.pop()
        if status in reached or status not in CLAIMED:
            continue
        reached.add(status)
        frontier += list(TRANSITIONS[status])
    assert reached == STARTED
    assert TRANSITIONS["ASSIGNED"]["IN_PROGRESS"] == "agent_started"


def test_waiting_input_is_claimed_and_counts_toward_concurrency():
    """The documented decision: a task waiting for a person's answer keeps its agent and its live process."""
    assert "WAITING_INPUT" in CLAIMED and COUNTS_TOWARD_CONCURRENCY == CLAIMED
    assert "WAITING_INPUT" in FOLLOWABLE and "WAITING_INPUT" in REPO_FIXED
    assert "WAITING_INPUT" not in WORKING  # shown apart: it waits for a person


def test_in_clause_uses_one_placeholder_per_status():
    assert in_clause(frozenset({"READY"})) == ("status IN (?)", ("READY",))
    assert in_clause(CLAIMED, "t.status") == ("t.status IN (?, ?, ?, ?)",
                                              ("ASSIGNED", "IN_PROGRESS", "WAITING_INPUT", "VERIFYING"))

