"""Pydantic models of what the store holds; services return them and tools send them as-is."""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, Field, model_serializer


class TaskStatus(str, Enum):  # noqa: UP042  StrEnum would change str(member), which messages and logs print
    DEFINED = "DEFINED"
    READY = "READY"
    ASSIGNED = "ASSIGNED"
    IN_PROGRESS = "IN_PROGRESS"
    WAITING_INPUT = "WAITING_INPUT"
    PAUSED = "PAUSED"
    VERIFYING = "VERIFYING"
    AWAITING_APPROVAL = "AWAITING_APPROVAL"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    BLOCKED = "BLOCKED"


TaskStatusName = Literal[
    "DEFINED", "READY", "ASSIGNED", "IN_PROGRESS", "WAITING_INPUT", "PAUSED", "VERIFYING",
    "AWAITING_APPROVAL", "COMPLETED", "FAILED", "BLOCKED",
]
AgentType = Literal["claude-code", "codex", "gemini", "command", "acp"]
ProjectStatus = Literal["ACTIVE", "PAUSED"]


class Project(BaseModel):
    id: str
    name: str
    status: ProjectStatus
    credit_weight: float
    max_concurrent_agents: int
    budget_limit: int | None = Field(None, description="token cap over the rolling 24 h window")
    workspace: str
    verify_command: str | None = Field(None, description="run on an agent's work before it lands")
    default_repo_id: str | None = Field(None, description="where tasks without repo_id run")
    merge_retries: int | None = Field(None, description="sends back per kind: failed check, unresolved conflict")
    best_of_pick: Literal["smallest", "first"] | None = Field(None, description="best of N's winner (default smallest)")
    instructions: str | None = Field(None, description="standing instructions added to every task's prompt")
    task_counts: dict[str, int] = Field(default_factory=dict)
    created_at: str
    updated_at: str


class Channel(BaseModel):
    channel_id: str
    channel_name: str | None = None


class TaskSummary(BaseModel):
    id: str
    project_id: str
    title: str
    status: TaskStatusName
    priority: int
    assigned_agent: str | None = None
    depends_on: list[str] = Field(default_factory=list)


class PermissionRequest(BaseModel):
    """An agent's question to a person: may it do this?"""

    id: str
    task_id: str
    project_id: str
    agent_id: str | None = None
    tool: str
    input: dict[str, Any] = Field(default_factory=dict)
    action: str
    description: str | None = None
    suggested_rule: str | None = Field(None, description="what remember=true adds to the project's policy")
    status: Literal["pending", "allowed", "denied", "expired"]
    decided_by: str | None = None
    message: str | None = None
    created_at: str
    expires_at: str
    answered_at: str | None = None


class Candidate(BaseModel):
    """One candidate of a best-of-N task (design.md "Best of N")."""

    task_id: str
    agent_id: str | None = Field(None, description="the agent it is pinned to, or that ran it")
    status: TaskStatusName
    outcome: Literal["running", "passed", "failed", "chosen", "not_chosen"]
    lines_changed: int | None = None
    reason: str | None = None
    branch: str | None = Field(None, description="kept for review until the candidate is deleted")


class SendBacks(BaseModel):
    """The merge queue's send-backs of a task since a person last restarted it or requested changes, against the
    caps (design.md "Merge queue"): past `cap` of either kind, or `free_cap` of the free ones, it is BLOCKED."""

    check: int = Field(description="for a failing check")
    conflict: int = Field(description="for a conflict its agent's last run brought no new resolution for (or markers)")
    cap: int = Field(description="the project's merge_retries: the most of each of the two")
    free: int = Field(description="for a conflict with work that landed after its last resolution: no retry spent")
    free_cap: int
    waits_for: list[str] = Field(default_factory=list, description="its rerun waits for theirs (the same files)")


class Task(BaseModel):
    id: str
    project_id: str
    title: str
    description: str
    status: TaskStatusName
    priority: int
    repo_id: str | None = None
    branch: str | None = None
    assigned_agent: str | None = None
    agent_type: str | None = None
    capabilities: list[str] = Field(default_factory=list, description="only an agent having all of them runs it")
    model: str | None = Field(None, description="overrides the agent's model for this task")
    depends_on: list[str] = Field(default_factory=list)
    dependents: list[str] = Field(default_factory=list)
    retry_count: int
    max_retries: int
    requires_approval: bool
    pr_url: str | None = None
    resume_after: str | None = None
    reason: str | None = Field(None, description="why it is BLOCKED, FAILED or PAUSED")
    next_step: str | None = Field(None, description="what to do about it")
    parent_task_id: str | None = Field(None, description="the task whose agent queued this one")
    best_of: int | None = Field(None, description="a best-of-N group: how many candidates run it")
    pick: Literal["smallest", "first"] | None = None
    chosen: str | None = Field(None, description="the candidate that landed")
    candidate_of: str | None = Field(None, description="the best-of-N group this candidate belongs to")
    candidates: list[Candidate] = Field(default_factory=list)
    pending_requests: list[PermissionRequest] = Field(default_factory=list,
                                                      description="the agent's questions waiting for answer_request")
    sandbox_denials: list[str] = Field(default_factory=list)  # what the OS sandbox refused its runs, newest first
    warning: str | None = Field(None, description="its project has no repo: where it runs instead")
    send_backs: SendBacks | None = None  # absent until the merge queue sends it back
    created_at: str
    updated_at: str

    @model_serializer(mode="wrap")
    def _without_send_backs(self, handler: Any) -> Any:
        data = handler(self)
        if isinstance(data, dict) and data.get("send_backs") is None:
            data.pop("send_backs", None)
        return data


class TaskRef(BaseModel):
    id: str
    title: str
    status: TaskStatusName | None = None


class Agent(BaseModel):
    id: str
    name: str
    agent_type: AgentType
    state: str
    current_task: str | None = None
    repo_id: str | None = None
    model: str | None = None
    capabilities: list[str] = Field(default_factory=list)
    command: str | None = None
    paused: bool = False
    label: str | None = None  # team mode: only daemons with this label run it
    instructions: str | None = Field(None, description="standing instructions added to every prompt it runs")
    created_at: str


class Event(BaseModel):
    id: int
    event_type: str
    project_id: str | None = None
    task_id: str | None = None
    agent_id: str | None = None
    payload: dict[str, Any] = Field(default_factory=dict)
    timestamp: str


class Tokens(BaseModel):
    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    total: int = 0


class TaskResult(BaseModel):
    status: str
    summary: str | None = None
    files_changed: list[str] = Field(default_factory=list)
    error_type: str | None = None
    error_message: str | None = None
    warning: str | None = Field(None, description="e.g. finished without changing any file")
    tokens: Tokens = Field(default_factory=Tokens)
    cost_usd: float | None = Field(0.0, description="null: a model of unknown price")
    partial: bool = Field(False, description="cut short: tokens and cost up to where it stopped")
    duration_s: float | None = None
    agent_id: str | None = None
    attempt: int
    created_at: str


class Repo(BaseModel):
    id: str
    project_id: str
    source_type: Literal["clone", "link", "init"]
    url: str | None = None
    source_path: str | None = None
    default_branch: str
    checkout_path: str
    created_at: str
    update_method: Literal["merge", "rebase"] | None = None  # how the merge queue updates a branch (None: merge)
    merge_batch: int | None = None  # the most tasks the merge queue lands at once (None or 1: one by one)


class Hook(BaseModel):
    id: str
    project_id: str
    name: str
    enabled: bool
    trigger: dict[str, Any]
    action: Literal["llm", "create_task"]
    prompt_template: str | None = None
    task_template: dict[str, Any] | None = None
    context_steps: list[dict[str, Any]] = Field(default_factory=list)
    cooldown_seconds: int
    llm_config: dict[str, Any] | None = None
    last_fired_at: str | None = None
    created_at: str
    updated_at: str


class HookRun(BaseModel):
    id: str
    hook_id: str
    trigger_reason: str
    status: Literal["running", "completed", "skipped", "failed"]
    skipped_reason: str | None = None
    tokens_used: int = 0
    started_at: str
    completed_at: str | None = None
    error: str | None = None


class AuditEntry(BaseModel):
    """One audit row: a tool call or an agent permission decision."""

    id: int
    time: str
    actor: str  # client:<clientInfo name> | agent:<agent id> | daemon
    project_id: str | None = None
    task_id: str | None = None
    action: str  # tool:run_command:pytest -q | Bash(npm test) | …
    arguments: dict[str, Any] = Field(default_factory=dict)  # secrets redacted, long values cut
    decision: str  # allow | deny | ask→accept | ask→decline | ask→cancel | ask→refused | ask→timeout | none
    decided_by: str = ""  # rule and its source, a preset default, person, timeout, elicitation unavailable
    outcome: str  # ok | error | refused
    message: str | None = None
    duration_ms: int | None = None
