"""An agent asks, the policy or a person answers: the engine's side of Claude Code's `can_use_tool`.

Each tool call the CLI asks about becomes an action (`Bash(npm test)`, `Edit(/tree/src/a.py)`…)
that the project's policy decides. allow and deny are answered at once. ask opens a permission
request (the task goes WAITING_INPUT, the agent process waits) and polls it until a person answers
or it expires; an expired request is a deny the model is told about. Every decision is audited.
Nobody is denied before someone was told: with a notifier configured the timeout counts from the
request's first notification (quiet hours hold it, so it may wait all night); without one, the default
timeout is UNTOLD_ASK_TIMEOUT (24 h) unless policy.toml sets ask_timeout.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from ..services import Services
from ..notify.config import NotifyConfig
from ..services.policy import UNTOLD_ASK_TIMEOUT, EffectivePolicy
from ..services.policy_rules import COMMAND_TOOLS, Action, agent_action, split_action
from .adapters.claude_code import control_response, user_message

log = logging.getLogger("agentqueue.permissions")

POLL_SECONDS = 0.2


def suggested_rule(request: dict[str, Any], action: Action, policy: EffectivePolicy | None = None) -> str:
    """The rule `remember` adds: Claude Code's own suggestion when it made one, else the exact action;
    for a command, one exact rule per simple command the policy did not already allow, a line each."""
    for suggestion in request.get("permission_suggestions") or []:
        if suggestion.get("type") == "addRules" and suggestion.get("behavior", "allow") == "allow":
            for rule in suggestion.get("rules") or []:
                if rule.get("toolName"):
                    content = rule.get("ruleContent")
                    return f"{rule['toolName']}({content})" if content else str(rule["toolName"])
    if action.tool in ("Edit", "Write", "MultiEdit", "NotebookEdit", "Read") and action.argument and action.root:
        path = Path(action.argument)
        if path.is_absolute() and path.is_relative_to(action.root):
            return f"{action.tool}({path.relative_to(action.root)})"
    if action.tool in COMMAND_TOOLS and policy is not None:
        parts = [str(p) for p in split_action(action) if policy.decide(p).decision != "allow"]
        return "\n".join(dict.fromkeys(parts)) or str(action)
    return str(action)


def _span(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:g} h"
    return f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:g} s"


class PermissionChannel:
    """Answers one run's questions; `task_id` None (a hook's llm run) turns every ask into a deny."""

    def __init__(self, services: Services, project_id: str, task_id: str | None, agent_id: str | None,
                 root: Path, write_log: Callable[[str], None] | None = None) -> None:
        self.services = services
        self.project_id = project_id
        self.task_id = task_id
        self.agent_id = agent_id
        self.root = root
        self.write_log = write_log or (lambda _line: None)

    # -- the wire (Claude Code's stream-json) -------------------------------------------------------
    def encode_answer(self, request_id: str, response: dict[str, Any]) -> bytes:
        return control_response(request_id, response)

    def encode_message(self, text: str) -> bytes:
        return user_message(text)

    # -- deciding ------------------------------------------------------------------------------------
    async def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        if request.get("subtype") != "can_use_tool":
            return {"behavior": "deny", "message": f"AgentQueue does not answer {request.get('subtype')!r} requests."}
        tool = str(request.get("tool_name") or "")
        given = request.get("input")
        tool_input: dict[str, Any] = given if isinstance(given, dict) else {}
        action = agent_action(tool, tool_input, self.root)
        started = time.monotonic()
        verdict = await anyio.to_thread.run_sync(self.services.policies.decide, action, self.project_id)
        if verdict.decision == "allow":
            self._audit(action, tool_input, "allow", verdict.decided_by, started)
            return {"behavior": "allow", "updatedInput": tool_input}
        if verdict.decision == "deny" or self.task_id is None:
            why = verdict.refusal(str(action)) if verdict.decision == "deny" else (
                f"{action} needs a person's approval under AgentQueue's policy, and a hook run cannot wait for one.")
            self._audit(action, tool_input, "deny", verdict.decided_by, started)
            self.write_log(f"[permission] denied {action} ({verdict.decided_by})")
            return {"behavior": "deny", "message": why + " Do not retry it; do the task another way or say what "
                                                         "you need in your summary."}
        return await self._ask(request, tool, tool_input, action, verdict.decided_by, started)

    async def _ask(self, request: dict[str, Any], tool: str, tool_input: dict[str, Any], action: Action,
                   asked_by: str, started: float) -> dict[str, Any]:
        assert self.task_id is not None
        task_id = self.task_id
        svc = self.services
        policy = svc.policies.effective(self.project_id)
        told = await anyio.to_thread.run_sync(self._notifies)
        timeout = policy.ask_timeout if told or policy.ask_timeout_set else UNTOLD_ASK_TIMEOUT
        # Until its first notification goes out, a request waits as long as one nobody is told about.
        waits = max(UNTOLD_ASK_TIMEOUT, timeout) if told else timeout
        opened = await anyio.to_thread.run_sync(
            lambda: svc.requests.open(task_id, self.agent_id, tool, tool_input, str(action),
                                      request.get("description") or tool_input.get("description"),
                                      suggested_rule(request, action, policy), waits, told))
        self.write_log(f"[permission] asked a person about {action} (request {opened.id}, {asked_by}; "
                       + ("the timeout counts from the first notification)" if told else
                          f"no notifier is configured, so it waits {_span(timeout)})"))
        deadline = time.monotonic() + waits
        notified = not told
        while True:
            current = await anyio.to_thread.run_sync(svc.requests.get, opened.id)
            if current.status != "pending":
                break
            heard: str | None = None
            if not notified:
                heard = await anyio.to_thread.run_sync(svc.requests.notified_at, opened.id)
            if heard:  # a person was just told: the timeout starts now
                notified = True
                deadline = time.monotonic() + timeout
                await anyio.to_thread.run_sync(svc.requests.extend, opened.id, timeout)
            if time.monotonic() >= deadline:
                expired = await anyio.to_thread.run_sync(svc.requests.expire, opened.id, "timeout")
                if expired is None:  # answered meanwhile: read the answer
                    expired = await anyio.to_thread.run_sync(svc.requests.get, opened.id)
                current = expired
                break
            await anyio.sleep(POLL_SECONDS)
        answer = {"allowed": "accept", "denied": "decline"}.get(current.status, "timeout")
        self._audit(action, tool_input, "ask→" + answer, current.decided_by or "person", started)
        self.write_log(f"[permission] {action}: {current.status} ({current.decided_by})")
        if current.status == "allowed":
            return {"behavior": "allow", "updatedInput": tool_input}
        if current.status == "denied":
            said = f" They said: {current.message}" if current.message else ""
            return {"behavior": "deny", "message": f"A person denied {action}.{said} Do the task another way, or "
                                                   "finish and say in your summary what you need."}
        if not told:
            waited = f"within {_span(waits)} (no notifier is configured: [notify] urls in config.toml would tell one)"
        elif notified:
            waited = f"within {_span(timeout)} of being told"
        else:
            waited = f"within {_span(waits)} (the notifier reached nobody: agentqueue doctor shows why)"
        return {"behavior": "deny", "message": f"Nobody answered the request to run {action} {waited}, so "
                                               "AgentQueue denied it. Do the task another way, or finish and say in "
                                               "your summary what you need."}

    def _notifies(self) -> bool:
        """Whether a notifier tells a person about this project's permission requests."""
        name = self.services.store.scalar("SELECT name FROM projects WHERE id = ?", (self.project_id,))
        route = NotifyConfig.from_values(self.services.settings.notify).route(self.project_id, name)
        return route.mode("permission") != "off"

    def _audit(self, action: Action, tool_input: dict[str, Any], decision: str, decided_by: str,
               started: float) -> None:
        actor = self.agent_id if self.agent_id and ":" in self.agent_id else f"agent:{self.agent_id or 'unknown'}"
        outcome = "ok" if decision in ("allow", "ask→accept") else "refused"
        try:
            self.services.audit.record(
                actor=actor, task_id=self.task_id, project_id=self.project_id, action=str(action),
                arguments=tool_input, decision=decision, decided_by=decided_by, outcome=outcome,
                duration_ms=int((time.monotonic() - started) * 1000))
        except Exception:  # the audit must never break a run
            log.exception("could not audit %s", action)
