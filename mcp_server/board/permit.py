"""Whether a board action may run: the daemon's own limits, then the policy gate's verdict for its tool.

Each board action stands for one MCP tool and gets that tool's verdict (allow / ask / deny) from the
same `call_policy` the MCP gate asks. An `ask` needs a person: the board's session has one (the
click is the answer), a script holding the bearer token has none, so it is refused with the same
message an MCP client that cannot ask gets. `serve --read-only` / `--toolsets` limit every HTTP
client, so they limit the board too, whatever the credential.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..services import Services
from ..server.selection import effective
from ..server.toolsets import offers
from ..tools.gate import cannot_ask

# The board's actions and the tool (name, module) each one stands for.
TOOLS: dict[str, tuple[str, str]] = {
    "create_task": ("create_task", "tasks"),
    "approve": ("approve_task", "tasks"),
    "restart": ("restart_task", "tasks"),
    "stop": ("stop_task", "tasks"),
    "skip": ("skip_task", "tasks"),
    "changes": ("request_changes", "tasks"),
    "answer_request": ("answer_request", "requests"),
    "pause_project": ("pause_project", "projects"),
    "resume_project": ("resume_project", "projects"),
    "orchestrator_pause": ("orchestrator_control", "system"),
    "orchestrator_resume": ("orchestrator_control", "system"),
}


@dataclass(frozen=True)
class Permit:
    """The verdict for one action: whether it runs, and what the audit row says decided it."""

    allowed: bool
    decision: str
    decided_by: str
    message: str = ""


def actor(credential: str | None) -> str:
    """Who acts, for the audit log: the board's session (a person) or a bearer-token script; never a claim."""
    return "board" if credential == "session" else "http:bearer"


def limited(action: str, options: dict[str, Any]) -> str | None:
    """Why the daemon's --read-only/--toolsets leave this action out (None when they do not)."""
    tool, group = TOOLS[action]
    if options.get("read_only"):
        return (f"This daemon is read-only (`agentqueue serve --read-only`): the board shows the queue but takes no "
                f"action ({tool} is not offered). Nothing was changed. Restart the daemon without --read-only to act.")
    toolsets = effective(options).ceiling  # `--toolsets default` (or all) limits only what clients list
    if toolsets is not None and not offers(list(toolsets), tool, group):
        return (f"This daemon offers only the toolsets {', '.join(toolsets) or '(none)'} (`agentqueue serve "
                f"--toolsets`), which leave out {tool}. Nothing was changed.")
    return None


def permit(svc: Services, action: str, arguments: dict[str, Any], credential: str | None,
           options: dict[str, Any]) -> Permit:
    """Runs in a worker thread (the policy reads the store). A ServiceError (an id naming nothing) passes up."""
    if (why := limited(action, options)) is not None:
        return Permit(False, "deny", "daemon: " + ("--read-only" if options.get("read_only") else "--toolsets"), why)
    tool, _ = TOOLS[action]
    decision = svc.call_policy.decide(tool, arguments, None, False)
    if decision.decision == "allow":
        return Permit(True, "allow", decision.decided_by)
    if decision.decision == "deny":
        return Permit(False, "deny", decision.decided_by,
                      decision.verdict.refusal(decision.step.what) + " Nothing was changed.")
    if credential == "session":  # the person at the board clicked: that is the answer the policy asks for
        return Permit(True, "ask→accept", f"person (board session); asked by {decision.decided_by}")
    return Permit(False, "ask→refused", f"no person (bearer token); asked by {decision.decided_by}",
                  cannot_ask(decision) + " Or take it on the board, logged in with `agentqueue board`: a person's "
                  "click answers the question.")
