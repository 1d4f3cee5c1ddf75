"""Every MCP tool call passes the policy: allow runs, deny refuses, ask asks the person by elicitation.

The official client in both protocol eras (2025 handshake: `elicitation/create` mid-call; 2026:
an `InputRequiredResult` the client answers and retries). A declined question changes nothing; a
client that cannot ask is refused with how to allow the action. Audit rows are checked beside.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.types import ElicitRequestParams, ElicitResult

from agentqueue.services import Services

from .conftest import db_snapshot, fail, ok

pytestmark = [pytest.mark.both_eras, pytest.mark.anyio]


class Person:
    """An elicitation callback that answers every question the same way and remembers what it was asked."""

    def __init__(self, action: str = "accept", approve: bool = True) -> None:
        self.action, self.approve = action, approve
        self.questions: list[str] = []

    async def __call__(self, context: Any, params: ElicitRequestParams) -> ElicitResult:
        self.questions.append(params.message)
        content = {"approve": self.approve} if self.action == "accept" else None
        return ElicitResult(action=self.action, content=content)


def mode(era: str) -> str:
    return "legacy" if era == "legacy" else "auto"


@pytest.fixture
def project(services: Services, tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    services.projects.create("Demo", workspace=str(workspace))
    (workspace / "build").mkdir(parents=True, exist_ok=True)
    return workspace


async def connect(server: Any, era: str, person: Person | None = None) -> Any:
    return Client(server, mode=mode(era), elicitation_callback=person)


def rows(services: Services, **filters: Any) -> list[Any]:
    return services.audit.query(limit=100, **filters)


def state_without_audit(services: Services) -> str:
    return db_snapshot(services)


# -- run_command in the standard preset ---------------------------------------------------------------

async def test_a_safe_command_runs_without_asking(server, services, project, era):
    person = Person()
    async with await connect(server, era, person) as client:
        done = await ok(client, "run_command", command="ls", working_dir="demo")
    assert done["returncode"] == 0 and "build" in done["stdout"]
    assert person.questions == []
    [row] = rows(services, action="tool:run_command*")
    assert (row.decision, row.outcome, row.project_id) == ("allow", "ok", "demo")
    assert "SAFE" not in row.decided_by and "preset standard" in row.decided_by


async def test_an_asked_command_runs_when_the_person_accepts(server, services, project, era):
    marker = project / "marker"
    person = Person("accept")
    async with await connect(server, era, person) as client:
        await ok(client, "run_command", command=f"rm -rf build && touch {marker}", working_dir="demo")
    assert marker.exists() and not (project / "build").exists()
    [question] = person.questions
    assert "rm -rf build" in question and "demo" in question and "tool:run_command" in question
    [row] = rows(services, action="tool:run_command*")
    assert (row.decision, row.outcome) == ("ask→accept", "ok")
    assert row.decided_by.startswith("person; asked by rule tool:run_command (preset standard)")


@pytest.mark.parametrize("answer", ["decline", "cancel", "accept-but-no"])
async def test_a_declined_question_changes_nothing(server, services, project, era, answer):
    marker = project / "marker"
    person = Person("accept", approve=False) if answer == "accept-but-no" else Person(answer)
    before = state_without_audit(services)
    async with await connect(server, era, person) as client:
        text = await fail(client, "run_command", command=f"rm -rf build; touch {marker}", working_dir="demo")
    assert "Declined: nothing was changed." in text
    assert not marker.exists() and (project / "build").is_dir()
    assert state_without_audit(services) == before
    [row] = rows(services, action="tool:run_command*")
    expected = "ask→cancel" if answer == "cancel" else "ask→decline"
    assert (row.decision, row.outcome, row.message) == (expected, "refused", text)


async def test_a_client_that_cannot_ask_is_refused_with_how_to_allow(server, services, project, era):
    marker = project / "marker"
    before = state_without_audit(services)
    async with await connect(server, era) as client:
        text = await fail(client, "run_command", command=f"rm -rf build; touch {marker}", working_dir="demo")
        assert not marker.exists() and state_without_audit(services) == before
        assert "cannot ask" in text and "elicitation" in text and "list=\"allow\"" in text
        # One rule per part of the compound command, since each part must be allowed.
        first = "edit_policy(add_rule='tool:run_command:rm -rf build', list=\"allow\", project_id='demo')"
        second = f"edit_policy(add_rule='tool:run_command:touch {marker}', list=\"allow\", project_id='demo')"
        assert f"allow rules: {first} and {second}" in text
        [row] = rows(services, action="tool:run_command*")
        assert (row.decision, row.outcome) == ("ask→refused", "refused")
        assert row.decided_by.startswith("elicitation unavailable; asked by rule tool:run_command")
        # What the message says to do works (a person adds the rules, in the file or from a client that asks).
        for rule in ("tool:run_command:rm -rf build", f"tool:run_command:touch {marker}"):
            services.policies.edit("demo", add_rule=rule, rule_list="allow")
        await ok(client, "run_command", command=f"rm -rf build; touch {marker}", working_dir="demo")
    assert marker.exists()


async def test_a_deny_rule_refuses_and_nothing_runs(server, services, project, era):
    services.policies.edit(add_rule="tool:run_command:touch:*", rule_list="deny")
    marker = project / "marker"
    person = Person("accept")
    async with await connect(server, era, person) as client:
        text = await fail(client, "run_command", command=f"ls && touch {marker}", working_dir="demo")
    assert not marker.exists() and person.questions == []
    assert "denied by AgentQueue's policy" in text and "tool:run_command:touch:*" in text and "remove_rule" in text
    [row] = rows(services, decision="deny")
    assert (row.outcome, row.decided_by) == ("refused", "rule tool:run_command:touch:* (global)")
