"""The task state machine as a table: every pair is either allowed or refused with advice."""

from __future__ import annotations

import pytest

from agentqueue.services.errors import ConflictError
from agentqueue.services.task_states import STOPPABLE, TERMINAL, TRANSITIONS, can_transition, check_transition
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
        if status in ("ASSIGNED", "IN_PROGRESS"):
            assert TRANSITIONS[status].get("READY") != "restart"
        elif status != "READY":  # restarting a READY task only resets its retries
            assert "READY" in TRANSITIONS[status], status


def test_terminal_states_leave_only_by_admin_action() -> None:
    for status in TERMINAL:
        assert set(TRANSITIONS[status].values()) <= {"restart", "skipped"}
    assert {"IN_PROGRESS", "FAILED", "READY"} <= STOPPABLE
    assert not {"COMPLETED", "BLOCKED", "AWAITING_APPROVAL"} & STOPPABLE
