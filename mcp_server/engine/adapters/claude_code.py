"""Claude Code (`claude -p`, stream-json both ways): the prompt as a message on stdin, permission
questions answered by the engine on the same channel, stdin closed after the result.

API failures arrive as `subtype:"success"` with `is_error:true`: they are classified from
`api_error_status`, the assistant `error` code and `terminal_reason`. Tokens come from
`result.modelUsage` and cost from `result.total_cost_usd`. A run with no `result` event died (or was
killed): it is paid for from the stream so far (`MessageUsage`), and its figures are marked partial.
"""

from __future__ import annotations

import json
import time
from typing import Any

from .base import AgentConfig, AgentEvent, RunResult, RunSpec, classify_message, load_json, tokens
from .prices import message_cost
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
            "--permission-mode", "default", "--permission-prompt-tool", "stdio", "--include-partial-messages",
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


_USAGE_KEYS = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
# Of the partial-message events (`--include-partial-messages`) only these two carry usage; the text deltas between
# them are skipped before they are parsed.
_STREAM_PREFIX = '{"type":"stream_event"'
_USAGE_EVENTS = ('"message_start"', '"message_delta"')


class MessageUsage:
    """The usage of each model response the stream has shown, counted once per message id.

    Consecutive `assistant` events of one response share its `message.id` and each carries a copy of its usage as
    it stood at `message_start` (output_tokens 1); the response's final output count comes only in its
    `message_delta` stream event. Counts within a message only grow, so each field keeps the largest value seen."""

    def __init__(self) -> None:
        self.messages: dict[str, tuple[str | None, dict[str, Any]]] = {}

    def see(self, message_id: str | None, model: str | None, usage: Any) -> None:
        if not message_id or not isinstance(usage, dict):
            return
        known_model, counts = self.messages.get(message_id, (None, {}))
        for key in _USAGE_KEYS:
            if isinstance(usage.get(key), int):
                counts[key] = max(counts.get(key, 0), usage[key])
        if isinstance(usage.get("cache_creation"), dict):
            counts["cache_creation"] = usage["cache_creation"]
        self.messages[message_id] = (known_model or model, counts)

    def tokens(self) -> dict[str, int]:
        sums = {k: sum(int(c.get(k, 0)) for _, c in self.messages.values()) for k in _USAGE_KEYS}
        return tokens(sums["input_tokens"], sums["output_tokens"], sums["cache_read_input_tokens"],
                      sums["cache_creation_input_tokens"])

    def cost(self) -> float | None:
        """Each response priced by its model; None when one that used tokens has a model of unknown price."""
        total = 0.0
        for model, counts in self.messages.values():
            if not any(counts.get(k) for k in _USAGE_KEYS):
                continue  # nothing used (the CLI's own <synthetic> error messages)
            cost = message_cost(model, counts)
            if cost is None:
                return None
            total += cost
        return round(total, 6)


class ClaudeCodeParser:
    def __init__(self) -> None:
        self.result: dict[str, Any] | None = None
        self.error_code: str | None = None
        self.texts: list[str] = []
        self.usage = MessageUsage()
        self.account_error: AccountError | None = None  # a failed login or a limit, at its first line

    def feed(self, line: str) -> list[AgentEvent]:
        if line.startswith(_STREAM_PREFIX) and not any(k in line for k in _USAGE_EVENTS):
            return []  # a text or tool-input delta: the whole block arrives in its assistant event
        event = load_json(line)
        if event is None:
            return [AgentEvent("text", line.rstrip())] if line.strip() else []
        kind = event.get("type")
        if kind == "stream_event":
            return self._stream_usage(event)
        if kind == "assistant":
            return self._assistant(event)
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

    def _assistant(self, event: dict[str, Any]) -> list[AgentEvent]:
        """One completed content block of a model response (text or a tool call), and that response's usage."""
        message = event.get("message") or {}
        self.usage.see(message.get("id"), message.get("model"), message.get("usage"))
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

    def _stream_usage(self, event: dict[str, Any]) -> list[AgentEvent]:
        inner = event.get("event") or {}
        if inner.get("type") == "message_start":
            message = inner.get("message") or {}
            self.usage.see(message.get("id"), message.get("model"), message.get("usage"))
        elif inner.get("type") == "message_delta":
            self.usage.see(event.get("api_message_id"), None, inner.get("usage"))
            return [AgentEvent("usage")]  # the response is whole: a kill now leaves nothing of it uncounted
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

    def running_usage(self) -> tuple[dict[str, int], float | None]:
        """What the stream has shown the run used so far (the runner keeps it on disk: engine/run_usage.py)."""
        return self.usage.tokens(), self.usage.cost()

    def finish(self, exit_code: int | None) -> RunResult:
        if self.result is None:  # died or killed: what the stream showed it had used is what it cost so far
            return RunResult("failed", summary="\n".join(self.texts)[-2000:], error_type="crashed",
                             error_message=f"claude exited ({exit_code}) without a result event.",
                             tokens=self.usage.tokens(), cost_usd=self.usage.cost(), partial=True)
        res = self.result
        summary = res.get("result") or "\n".join(self.texts)[-2000:]
        common: dict[str, Any] = {"summary": summary or "", "tokens": self._tokens(),
                                  "cost_usd": float(res.get("total_cost_usd") or 0)}
        seen = self.usage.tokens()
        if seen["total"] > common["tokens"]["total"]:
            # A result that accounts for less than the stream showed (an aborted turn reports zeros): the stream
            # is the better figure, and still a partial one.
            common.update(tokens=seen, cost_usd=self.usage.cost(), partial=True)
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
