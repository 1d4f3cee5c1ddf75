"""The policy gate every tool call passes: allow runs, deny refuses, ask asks the person (elicitation).

`gate` is a resolver (`Annotated[ElicitationResult[Approval], Resolve(gate)]`, added to every tool by
the registry and left out of the input schema). It reads the call's name and arguments, asks
`services.call_policy` and either returns an approval, raises a refusal, or returns an `Elicit`
question: on a 2025 connection the SDK sends `elicitation/create` mid-call; on a 2026 one it answers
with an `InputRequiredResult` and the client retries with the answer. What happened is noted in
the call's `CallRecord`, which the audit middleware writes after the call.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Annotated, Any

import anyio
from mcp.server.elicitation import AcceptedElicitation, ElicitationResult
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.resolve import Elicit, Resolve
from pydantic import BaseModel, Field

from ..services.call_policy import CallDecision
from ..services.errors import ServiceError, os_limit_error
from ..services.limits import MAX_NAME, quoted
from .state import client_state, with_caller_paths

DECLINED = "Declined: nothing was changed."


class Approval(BaseModel):
    """What a person is asked to confirm (elicitation schemas are flat primitives)."""

    approve: bool = Field(default=True, description="Allow this action")


@dataclass
class CallRecord:
    """One tool call as the audit log sees it; filled by the gate and the tool wrapper."""

    name: str
    arguments: dict[str, Any]
    project_id: str | None = None
    task_id: str | None = None
    action: str | None = None
    decision: str = "none"  # none = the call never reached the policy (unknown tool, invalid arguments)
    decided_by: str = ""
    asked: bool = False
    refused: bool = False  # refused by the policy, a person or the connection's selection
    extra: dict[str, Any] = field(default_factory=dict)

    def note(self, decision: CallDecision) -> None:
        self.project_id, self.task_id, self.action = decision.project_id, decision.task_id, decision.action
        self.decision, self.decided_by = decision.decision, decision.decided_by


# Set by the audit middleware for each tools/call; the gate and the wrapper fill it in.
CURRENT_CALL: ContextVar[CallRecord | None] = ContextVar("agentqueue_current_call", default=None)


def can_elicit(ctx: Context) -> bool:
    """Whether the client declared form elicitation (a bare `elicitation: {}` counts, as in the SDK)."""
    capabilities = ctx.client_capabilities
    elicitation = capabilities.elicitation if capabilities is not None else None
    return elicitation is not None and (elicitation.form is not None or elicitation.url is None)


def cannot_ask(decision: CallDecision) -> str:
    """The refusal a client without elicitation gets: what, why, and how a person can allow it."""
    project = f", project_id={decision.project_id!r}" if decision.project_id else ""
    calls = " and ".join(f"edit_policy(add_rule={quoted(rule, 300)}, list=\"allow\"{project})"
                         for rule in decision.suggested)
    if not calls:  # no rule can name it (a command too long or unreadable to allow part by part)
        return (f"{decision.step.what}: AgentQueue's policy asks a person before this ({decision.decided_by}), and "
                "this client cannot ask (it does not support MCP elicitation). Nothing was changed. Make this call "
                "from a client that supports elicitation.")
    return (f"{decision.step.what}: AgentQueue's policy asks a person before this ({decision.decided_by}), and this "
            "client cannot ask (it does not support MCP elicitation). Nothing was changed. To allow it, a person "
            f"adds the allow rule{'s' if len(decision.suggested) > 1 else ''}: {calls} from a client that can ask, "
            "or in $AGENTQUEUE_HOME/policy.toml; or make this call from a client that supports elicitation.")


def strings_in(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*strings_in(k), *strings_in(v))]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in strings_in(v)]
    return []


def refuse_surrogates(kwargs: dict[str, Any]) -> None:
    """A lone UTF-16 surrogate (JSON allows the escape) fits no file, database or process: refuse it up front."""
    for name, value in kwargs.items():
        for text in strings_in(value):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as error:
                raise ToolError(str(os_limit_error(error, name))) from None


def refuse_oversized_ids(kwargs: dict[str, Any]) -> None:
    """An id longer than any id AgentQueue makes names nothing: say so before a lookup (PostgreSQL refuses an
    index key that long with its own text, which must not reach the caller)."""
    for name, value in kwargs.items():
        if not (name.endswith("_id") or name == "depends_on"):
            continue
        for text in strings_in(value):
            if len(text) > MAX_NAME:
                what = "task" if name == "depends_on" else name.removesuffix("_id").replace("_", " ")
                raise ToolError(f"{name} is {len(text):,} characters long, and AgentQueue's ids are at most "
                                f"{MAX_NAME}: "
                                f"it names no {what}. Nothing was changed; pass an id as the list tools show it.")


async def gate(ctx: Context) -> Approval | Elicit[Approval]:
    params = ctx.request_context.params or {}
    name = str(params.get("name") or "")
    arguments = params.get("arguments") or {}
    arguments = dict(arguments) if isinstance(arguments, dict) else {}
    refuse_surrogates(arguments)  # before the policy looks anything up with them
    refuse_oversized_ids(arguments)
    record = CURRENT_CALL.get() or CallRecord(name, arguments)
    state = client_state(ctx)
    arguments = with_caller_paths(name, arguments, state)  # judged as the tool will use them
    from .registry import SPECS  # the registry imports this module

    spec = SPECS.get(name)
    read_only = bool(spec and spec.read_only)
    try:
        decision = await anyio.to_thread.run_sync(
            state.services.call_policy.decide, name, arguments, state.active_project, read_only)
    except ServiceError as error:  # an id the action needs names nothing: the tool's own message
        record.decided_by = "not reached: " + str(error)[:120]
        raise ToolError(str(error)) from None
    except (OSError, ValueError, OverflowError) as error:  # an argument past an OS limit: an input error
        if (refused := os_limit_error(error, "an argument")) is None:
            raise
        record.decided_by = "not reached: " + str(refused)[:120]
        raise ToolError(str(refused)) from None
    record.note(decision)
    if decision.decision == "allow":
        return Approval()
    record.refused = True
    if decision.decision == "deny":
        raise ToolError(decision.verdict.refusal(decision.step.what) + " Nothing was changed.")
    if not can_elicit(ctx):
        record.decision, record.decided_by = "ask→refused", f"elicitation unavailable; asked by {decision.decided_by}"
        raise ToolError(cannot_ask(decision))
    record.asked, record.refused = True, False
    return Elicit(decision.question(), Approval)


def settle(approval: Any) -> None:
    """In the tool wrapper: an accepted question runs the call; a declined or cancelled one refuses it."""
    if approval is None:
        return  # called from Python, not through MCP
    record = CURRENT_CALL.get()
    accepted = isinstance(approval, AcceptedElicitation) and getattr(approval.data, "approve", True) is not False
    if record is not None and record.asked:
        answer = getattr(approval, "action", "decline")  # accept (with approve=false: a decline), decline, cancel
        record.decision = "ask→accept" if accepted else f"ask→{'decline' if answer == 'accept' else answer}"
        record.decided_by = f"person; asked by {record.decided_by}"
        record.refused = not accepted
    if not accepted:
        raise ToolError(DECLINED)


ApprovalParam = Annotated[ElicitationResult[Approval], Resolve(gate)]
