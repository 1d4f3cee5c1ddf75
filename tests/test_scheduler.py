"""The scheduler as a pure function: state in, assignments out."""

from __future__ import annotations

from collections import Counter

from agentqueue.engine.scheduler import IdleAgent, ProjectState, QueueState, ReadyTask, schedule


def tasks(project: str, n: int, **kw) -> tuple[ReadyTask, ...]:
    return tuple(ReadyTask(id=f"{project}-{i}", project_id=project, created_at=f"2026-01-01T00:00:{i:02d}Z", **kw)
                 for i in range(n))


def agents(n: int, **kw) -> tuple[IdleAgent, ...]:
    return tuple(IdleAgent(id=f"agent-{i}", **kw) for i in range(n))


def test_nothing_to_do_without_agents_or_tasks() -> None:
    assert schedule(QueueState((ProjectState("p"),), tasks("p", 3), ())) == []
    assert schedule(QueueState((ProjectState("p"),), (), agents(2))) == []


def test_paused_orchestrator_assigns_nothing() -> None:
    assert schedule(QueueState((ProjectState("p"),), tasks("p", 3), agents(2), orchestrator_paused=True)) == []


def test_priority_then_age_within_a_project() -> None:
    ready = (ReadyTask("late-urgent", "p", priority=1, created_at="2026-01-02"),
             ReadyTask("old", "p", priority=100, created_at="2026-01-01"),
             ReadyTask("new", "p", priority=100, created_at="2026-01-03"))
    got = schedule(QueueState((ProjectState("p", max_concurrent_agents=5),), ready, agents(3)))
    assert [a.task_id for a in got] == ["late-urgent", "old", "new"]


def test_max_concurrent_agents_counts_running_tasks() -> None:
    got = schedule(QueueState((ProjectState("p", max_concurrent_agents=2, running=1),), tasks("p", 5), agents(4)))
    assert len(got) == 1


def test_paused_project_and_budget_limit_get_nothing() -> None:
    projects = (ProjectState("paused", paused=True), ProjectState("broke", budget_limit=1000, tokens_24h=1000),
                ProjectState("ok"))
    got = schedule(QueueState(projects, tasks("paused", 2) + tasks("broke", 2) + tasks("ok", 2), agents(4)))
    assert {a.project_id for a in got} == {"ok"} and len(got) == 2


def test_under_served_project_goes_first() -> None:
    projects = (ProjectState("heavy-user", tokens_24h=60_000), ProjectState("light-user", tokens_24h=1_000))
    got = schedule(QueueState(projects, tasks("heavy-user", 3) + tasks("light-user", 3), agents(1)))
    assert got[0].project_id == "light-user"


def test_credit_weight_skews_the_share() -> None:
    # Equal usage, weights 3:1: of 4 agents, the heavier project gets 3.
    projects = (ProjectState("big", credit_weight=3.0, max_concurrent_agents=10),
                ProjectState("small", credit_weight=1.0, max_concurrent_agents=10))
    got = schedule(QueueState(projects, tasks("big", 10) + tasks("small", 10), agents(4)))
    assert Counter(a.project_id for a in got) == {"big": 3, "small": 1}


def test_one_round_spreads_agents_across_projects() -> None:
    projects = tuple(ProjectState(p, max_concurrent_agents=5) for p in ("a", "b", "c"))
    got = schedule(QueueState(projects, tasks("a", 5) + tasks("b", 5) + tasks("c", 5), agents(3)))
    assert sorted(a.project_id for a in got) == ["a", "b", "c"]


def test_agent_type_must_match() -> None:
    ready = (ReadyTask("needs-codex", "p", agent_type="codex"), ReadyTask("anyone", "p", created_at="z"))
    got = schedule(QueueState((ProjectState("p", max_concurrent_agents=5),), ready,
                              (IdleAgent("claude", agent_type="claude-code"),)))
    assert [a.task_id for a in got] == ["anyone"]
    got = schedule(QueueState((ProjectState("p", max_concurrent_agents=5),), ready[:1],
                              (IdleAgent("claude", agent_type="claude-code"),)))
    assert got == []


def test_repo_bound_agent_takes_only_its_repo_and_chooses_first() -> None:
    ready = (ReadyTask("web-task", "p", repo_id="web", created_at="1"),
             ReadyTask("api-task", "p", repo_id="api", created_at="2"))
    bound = IdleAgent("z-web-agent", repo_id="web")
    free = IdleAgent("a-free-agent")
    got = schedule(QueueState((ProjectState("p", max_concurrent_agents=5),), ready, (free, bound)))
    assert {(a.agent_id, a.task_id) for a in got} == {("z-web-agent", "web-task"), ("a-free-agent", "api-task")}
    got = schedule(QueueState((ProjectState("p"),), ready[1:], (bound,)))
    assert got == []


def test_each_task_is_assigned_once() -> None:
    got = schedule(QueueState((ProjectState("p", max_concurrent_agents=50),), tasks("p", 3), agents(10)))
    assert len(got) == 3 and len({a.task_id for a in got}) == 3 and len({a.agent_id for a in got}) == 3
