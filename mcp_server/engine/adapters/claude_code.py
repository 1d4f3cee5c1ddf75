"""Claude Code (`claude -p`, stream-json both ways): the prompt as a message on stdin, permission
questions answered by the engine on the same channel, stdin closed after the result.

API failures arrive as `subtype:"success"` with `is_error:true`: they are classified from
`api_error_status`, the assistant `error` code and `terminal_reason`. Tokens come from
`result.modelUsage` and cost from `result.total_cost_usd` (never summed from assistant events).
A run with no `result` event died.
"""

from __future__ import annotations

import json
import time
from typing import Any

from .base import AgentConfig, AgentEvent, RunResult, RunSpec, classify_message, load_json, tokens
from .limits import AccountError, limit_kind, reset_time, resets_in_event

_ERROR_CODES = {
    "authentication_failed": "auth", "oauth_org_not_allowed": "auth", "account_on_hold": "auth",
    "verification_required": "auth", "cloud_credential_error": "auth", "billing_error": "quota",
    "rate_limit": "rate_limit", "overloaded": "rate_limit", "server_error": "rate_limit",
}
# The codes that park the kind at once; overloaded and server errors are left to the CLI's own retries.
_PARKING_CODES = {code: kind for code, kind in _ERROR_CODES.items() if code not in ("overloaded", "server_error")}
# The CLI's own backoff before retry n is about 0.5 s × 2^(n-1) (1.2 s at attempt 1 in older versions): a wait
# well beyond it came from the API's `retry-after` header, so it is the limit's reset time.
_OWN_BACKOFF = 0.5
_OWN_SPREAD = 2.5


# Every built-in tool that reads, changes or reaches out: an `ask` rule sends each call to us
# (`can_use_tool` over stream-json), so AgentQueue's policy decides and records every one of them.
ASKED_TOOLS = ["Bash", "Read", "Glob", "Grep", "LS", "Edit", "Write", "MultiEdit", "NotebookEdit", "NotebookRead",
               "WebFetch", "WebSearch"]


def _text_of(message: dict[str, Any]) -> str:
    return " ".join(b.get("text") or "" for b in message.get("content") or [] if isinstance(b, dict)).strip()


def user_message(text: str) -> bytes:
    """One stream-json user message (the prompt, or a note from the watchdog mid-run)."""
    return (json.dumps({"type": "user", "message": {"role": "user", "content": text}}) + "\n").encode()


def control_response(request_id: str, response: dict[str, Any]) -> bytes:
    return (json.dumps({"type": "control_response", "response": {
        "subtype": "success", "request_id": request_id, "response": response}}) + "\n").encode()


def build(config: AgentConfig, prompt: str, context: str, mcp_config: dict[str, Any] | None) -> RunSpec:
    """`claude -p` on a two-way stream-json channel: the prompt goes in as a message, permission
    questions come out as `control_request`s that the engine answers from the policy."""
    servers = (mcp_config or {}).get("mcpServers", {})
    settings = {"permissions": {"ask": ASKED_TOOLS}}
    argv = [config.binary or "claude", "-p", "--input-format", "stream-json", "--output-format", "stream-json",
            "--verbose", "--strict-mcp-config", "--mcp-config", json.dumps({"mcpServers": servers}),
            "--permission-mode", "default", "--permission-prompt-tool", "stdio",
            "--settings", json.dumps(settings), "--max-turns", str(config.max_turns)]
    # Deny rules on tools it would not ask about are enforced by the CLI itself; the asked tools get our
    # answer (with the rule named, and audited).
    unasked = [r for r in config.deny_rules if r.split("(", 1)[0] not in ASKED_TOOLS]
    if unasked:
        argv += ["--disallowedTools", ",".join(unasked)]
    if not config.project_settings:  # planted by an unmerged run: hooks and settings of the repo are not loaded
        argv += ["--setting-sources", "user"]
    if config.model:
        argv += ["--model", config.model]
    if context:
        argv += ["--append-system-prompt", context]
    return RunSpec(argv=argv, stdin=user_message(prompt), interactive=True)


class ClaudeCodeParser:
    def __init__(self) -> None:
        self.result: dict[str, Any] | None = None
        self.error_code: str | None = None
        self.texts: list[str] = []
        self.account_error: AccountError | None = None  # a failed login or a limit, at its first line

    def feed(self, line: str) -> list[AgentEvent]:
        event = load_json(line)
        if event is None:
            return [AgentEvent("text", line.rstrip())] if line.strip() else []
        kind = event.get("type")
        if kind == "assistant":
            message = event.get("message") or {}
            if event.get("error"):
                self.error_code = event["error"]
                self._account(_PARKING_CODES.get(event["error"]), _text_of(message) or str(event["error"]))
            out = []
            for block in message.get("content") or []:
                if block.get("type") == "text" and block.get("text"):
                    self.texts.append(block["text"])
                    out.append(AgentEvent("text", block["text"]))
                elif block.get("type") == "tool_use":
                    out.append(AgentEvent("tool_call", tool=block.get("name"), args=block.get("input")))
            return out
        if kind == "user":
            content = (event.get("message") or {}).get("content")
            if isinstance(content, list):
                return [AgentEvent("tool_result", text=json.dumps(c.get("content"))[:2000])
                        for c in content if isinstance(c, dict) and c.get("type") == "tool_result"]
            return []
        if kind == "system":
            subtype = event.get("subtype")
            if subtype == "permission_denied":  # settled by the CLI itself (a deny rule we passed)
                return [AgentEvent("system", f"permission denied by the CLI: {event.get('message')}",
                                   tool=event.get("tool_name"), data=event)]
            if subtype == "api_retry":
                self._retrying(event)
                return [AgentEvent("system", f"API retry {event.get('attempt')}/{event.get('max_retries')} "
                                             f"({event.get('error_status')} {event.get('error')})")]
            return [AgentEvent("system", str(subtype))]
        if kind == "result":
            self.result = event
            return [AgentEvent("system", f"result: {event.get('subtype')} is_error={event.get('is_error')}"),
                    AgentEvent("done")]
        if kind == "control_request":
            return [AgentEvent("control", data=event)]
        if kind == "rate_limit_event":
            return self._plan_limit(event)
        return []

    def _plan_limit(self, event: dict[str, Any]) -> list[AgentEvent]:
        """A claude.ai plan's limits: `rejected` means used up until `resetsAt`."""
        info = event.get("rate_limit_info") or event
        if info.get("status") == "rejected":
            self._account("quota", f"usage limit reached ({info.get('rateLimitType') or 'plan'})",
                          resets_in_event(info))
        return [AgentEvent("system", f"rate limit: {info.get('status')}")]

    def _retrying(self, event: dict[str, Any]) -> None:
        """An `api_retry` event: a 401/403 or a 429 parks the kind now instead of sitting through the retries."""
        status, code = event.get("error_status"), event.get("error")
        kind = "auth" if status in (401, 403) else "rate_limit" if status == 429 else _PARKING_CODES.get(code or "")
        if kind is None:
            return
        delay = float(event.get("retry_delay_ms") or 0) / 1000
        attempt = max(int(event.get("attempt") or 1), 1)
        told = kind != "auth" and delay > _OWN_BACKOFF * 2 ** (attempt - 1) * _OWN_SPREAD + 0.25
        said = f"the model API answered {status or ''} {code or ''}".replace("  ", " ").strip()
        self._account(kind, f"{said.capitalize()} (stopped at the first of the CLI's {event.get('max_retries')} "
                            "retries)", time.time() + delay if told else None)

    def _account(self, kind: str | None, message: str, resets_at: float | None = None) -> None:
        if kind is None or self.account_error is not None:
            return
        if kind in ("rate_limit", "quota"):
            kind = "quota" if kind == "quota" else limit_kind(message)
            resets_at = resets_at if resets_at is not None else reset_time(message)
        self.account_error = AccountError(kind, message, resets_at)  # type: ignore[arg-type]

    def _tokens(self) -> dict[str, int]:
        assert self.result is not None
        models = self.result.get("modelUsage") or {}
        if models:
            sums = {k: sum(int(m.get(k) or 0) for m in models.values())
                    for k in ("inputTokens", "outputTokens", "cacheReadInputTokens", "cacheCreationInputTokens")}
            return tokens(sums["inputTokens"], sums["outputTokens"], sums["cacheReadInputTokens"],
                          sums["cacheCreationInputTokens"])
        usage = self.result.get("usage") or {}
        return tokens(usage.get("input_tokens"), usage.get("output_tokens"), usage.get("cache_read_input_tokens"),
                      usage.get("cache_creation_input_tokens"))

    def finish(self, exit_code: int | None) -> RunResult:
        if self.result is None:
            return RunResult("failed", summary="\n".join(self.texts)[-2000:], error_type="crashed",
                             error_message=f"claude exited ({exit_code}) without a result event.")
        res = self.result
        summary = res.get("result") or "\n".join(self.texts)[-2000:]
        common: dict[str, Any] = {"summary": summary or "", "tokens": self._tokens(),
                                  "cost_usd": float(res.get("total_cost_usd") or 0)}
        if not res.get("is_error"):
            return RunResult("completed", **common)
        message = res.get("result") or "; ".join(res.get("errors") or []) or str(res.get("subtype"))
        kind = self._classify(res, message)
        resets = reset_time(message) if kind in ("rate_limit", "quota") else None
        return RunResult("failed", error_type=kind, error_message=message, resets_at=resets, **common)

    def _classify(self, res: dict[str, Any], message: str) -> str:
        status = res.get("api_error_status")
        if res.get("subtype") == "error_max_turns" or res.get("terminal_reason") == "max_turns":
            return "max_turns"
        if res.get("subtype") == "error_max_budget_usd":
            return "quota"
        if res.get("terminal_reason") == "prompt_too_long":
            return "prompt_too_long"
        if status in (401, 403):
            return "auth"
        if status in (429, 529, 503):
            return "rate_limit"
        if self.error_code in _ERROR_CODES:
            return _ERROR_CODES[self.error_code]
        return classify_message(message) or "crashed"
