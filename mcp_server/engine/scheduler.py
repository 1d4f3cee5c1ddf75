"""The scheduler: a pure function from the queue's state to assignments (agent, task).

Fair share is weighted fair queueing over tokens: each project's "virtual usage" is its token use
over the rolling 24 h window plus an estimate for each run it has in flight (so one round spreads
agents across projects), divided by its `credit_weight`; the lowest goes first. Within a project,
lower `priority` first, then the oldest task. A project is skipped when paused, at its
`max_concurrent_agents`, or at its `budget_limit`; a paused orchestrator assigns nothing. A task runs only on an
agent that can run it (`can_run`).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ProjectState:
    id: str
    credit_weight: float = 1.0
    max_concurrent_agents: int = 2
    budget_limit: int | None = None
    paused: bool = False
    tokens_24h: int = 0
    running: int = 0


@dataclass(frozen=True)
class ReadyTask:
    id: str
    project_id: str
    priority: int = 100
    created_at: str = ""
    agent_type: str | None = None
    repo_id: str | None = None
    agent_id: str | None = None  # sent back by the merge queue: only this agent takes it (it did the work)
    capabilities: tuple[str, ...] = ()  # an agent must have every one


@dataclass(frozen=True)
class IdleAgent:
    id: str
    agent_type: str = "claude-code"
    repo_id: str | None = None
    capabilities: tuple[str, ...] = ()


@dataclass(frozen=True)
class QueueState:
    projects: tuple[ProjectState, ...]
    tasks: tuple[ReadyTask, ...]
    agents: tuple[IdleAgent, ...]
    orchestrator_paused: bool = False
    tokens_per_run_estimate: int = 10_000
    skipped: bool = False  # some projects were being scheduled by another daemon and are not in `projects`


@dataclass(frozen=True)
class Assignment:
    agent_id: str
    task_id: str
    project_id: str


@dataclass
class _Share:
    project: ProjectState
    queue: list[ReadyTask]
    running: int
    virtual_tokens: float = field(default=0.0)


def can_run(agent: IdleAgent, task: ReadyTask) -> bool:
    """A task's agent_type must match and its capabilities be the agent's; an agent bound to a repo takes only that
    repo's tasks; a task sent back to its agent waits for that one."""
    if task.agent_id and task.agent_id != agent.id:
        return False
    if task.agent_type and task.agent_type != agent.agent_type:
        return False
    if not set(task.capabilities) <= set(agent.capabilities):
        return False
    return not (agent.repo_id and agent.repo_id != task.repo_id)


def schedule(state: QueueState) -> list[Assignment]:
    if state.orchestrator_paused:
        return []
    shares: dict[str, _Share] = {}
    for project in state.projects:
        if project.paused:
            continue
        if project.budget_limit and project.tokens_24h >= project.budget_limit:
            continue
        shares[project.id] = _Share(project, [], project.running,
                                    project.tokens_24h + project.running * state.tokens_per_run_estimate)
    for task in sorted(state.tasks, key=lambda t: (t.priority, t.created_at, t.id)):
        if task.project_id in shares:
            shares[task.project_id].queue.append(task)
    assignments: list[Assignment] = []
    # Repo-bound and type-specific agents choose first, so generalists don't take their only work.
    agents = sorted(state.agents, key=lambda a: (a.repo_id is None, a.id))
    for agent in agents:
        candidates = [s for s in shares.values()
                      if s.queue and s.running < s.project.max_concurrent_agents
                      and any(can_run(agent, t) for t in s.queue)]
        if not candidates:
            continue
        best = min(candidates, key=lambda s: (s.virtual_tokens / max(s.project.credit_weight, 1e-9),
                                              s.queue[0].created_at, s.project.id))
        task = next(t for t in best.queue if can_run(agent, t))
        best.queue.remove(task)
        best.running += 1
        best.virtual_tokens += state.tokens_per_run_estimate
        assignments.append(Assignment(agent.id, task.id, task.project_id))
    return assignments
