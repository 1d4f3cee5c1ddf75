"""OpenAI Codex (`codex exec --json`), prompt as an argument, stdin closed (a pipe would be appended)."""

from __future__ import annotations

import re
from typing import Any

from .base import AgentConfig, AgentEvent, RunResult, RunSpec, classify_message, load_json, tokens
from .limits import AccountError, limit_kind, reset_time, resets_in_event


def account_error(message: str, event: dict[str, Any] | None = None) -> AccountError | None:
    """A failed login or a limit in a Codex error text ("unexpected status 401 Unauthorized", "429 Too Many
    Requests", "You've hit your usage limit … try again in 2 hours"); None for any other error."""
    kind = classify_message(message)
    if kind == "auth":
        return AccountError("auth", message)
    if kind in ("rate_limit", "quota") or "usage limit" in message.lower():
        resets = resets_in_event(event) if event else None
        return AccountError("quota" if kind == "quota" else limit_kind(message), message,
                            resets if resets is not None else reset_time(message))
    return None


# Codex asks no host about single calls: each preset maps to its sandbox (in `exec`, nothing is asked).
SANDBOX = {"readonly": ["-s", "read-only"], "standard": ["-s", "workspace-write"],
           "autonomous": ["--dangerously-bypass-approvals-and-sandbox"]}


def build(config: AgentConfig, prompt: str, context: str, mcp_config: dict[str, Any] | None) -> RunSpec:
    # Inside AgentQueue's sandbox Codex's own (bubblewrap too) cannot start; ours holds the same walls: the
    # worktree read-only under `readonly`, the network an allowlist under every preset.
    walls = SANDBOX["autonomous"] if config.sandboxed else SANDBOX.get(config.preset, SANDBOX["standard"])
    argv = [config.binary or "codex", "exec", "--json", "--skip-git-repo-check", *walls]
    if config.model:
        argv += ["-m", config.model]
    full = f"{context}\n\n{prompt}" if context else prompt
    return RunSpec(argv=[*argv, "--", full], stdin=None)


class CodexParser:
    def __init__(self) -> None:
        self.usage = dict.fromkeys(("input", "output", "cache_read", "cache_write", "total"), 0)
        self.messages: list[str] = []
        self.failure: str | None = None
        self.turns = 0
        self.in_turn = False  # a turn started and has not completed: its usage never reached the stream
        self.account_error: AccountError | None = None  # a failed login or a limit, at its first error line

    def feed(self, line: str) -> list[AgentEvent]:
        event = load_json(line)
        if event is None:
            return [AgentEvent("text", line.rstrip())] if line.strip() else []
        kind = event.get("type")
        item = event.get("item") or {}
        if kind == "turn.started":
            self.in_turn = True
            return []
        if kind == "item.started" and item.get("type") == "command_execution":
            return [AgentEvent("tool_call", tool="shell", args={"command": item.get("command")})]
        if kind == "item.started" and item.get("type") == "mcp_tool_call":
            tool = f"{item.get('server')}.{item.get('tool')}"
            return [AgentEvent("tool_call", tool=tool, args=item.get("arguments"))]
        if kind == "item.completed":
            if item.get("type") == "agent_message":
                self.messages.append(item.get("text") or "")
                return [AgentEvent("text", item.get("text") or "")]
            if item.get("type") in ("command_execution", "mcp_tool_call"):
                return [AgentEvent("tool_result", text=str(item.get("aggregated_output") or item.get("result"))[:2000])]
            if item.get("type") == "file_change":
                return [AgentEvent("tool_result", text=f"file_change {item.get('changes')}"[:2000])]
            if item.get("type") == "error":
                return [AgentEvent("system", item.get("message") or "")]
            return []
        if kind == "turn.completed":
            usage = event.get("usage") or {}
            cached = int(usage.get("cached_input_tokens") or 0)
            # OpenAI counts cached tokens inside input_tokens; ours are uncached input.
            turn = tokens(int(usage.get("input_tokens") or 0) - cached, usage.get("output_tokens"), cached,
                          usage.get("cache_write_input_tokens"))
            for key, value in turn.items():
                self.usage[key] += value
            self.turns += 1
            self.in_turn = False
            return [AgentEvent("system", "turn completed")]
        if kind == "turn.failed":
            self.in_turn = False
            self.failure = (event.get("error") or {}).get("message") or "turn failed"
            self._account(self.failure, event)
            return [AgentEvent("error", self.failure)]
        if kind == "error":  # "Reconnecting... 1/5 (unexpected status 401 …)": the first of the CLI's retries
            self._account(event.get("message") or "", event)
            return [AgentEvent("system", event.get("message") or "")]
        self._used_up(event.get("rate_limits"))
        return []

    def _used_up(self, limits: Any) -> None:
        """A rate-limit snapshot (`rate_limits`: primary/secondary windows) with a window used up parks the kind."""
        for window in (limits.values() if isinstance(limits, dict) else ()):
            if isinstance(window, dict) and float(window.get("used_percent") or 0) >= 100:
                self._account("usage limit reached (rate limit window used up)", window)

    def feed_stderr(self, line: str) -> None:
        """Codex logs its HTTP errors on stderr too: a 401 or a limit there parks the kind as well."""
        if re.search(r"\b(401|403|429)\b|usage limit|api key", line, re.IGNORECASE):
            self._account(line.strip())

    def _account(self, message: str, event: dict[str, Any] | None = None) -> None:
        if self.account_error is None and message:
            self.account_error = account_error(message, event)

    def finish(self, exit_code: int | None) -> RunResult:
        summary = "\n".join(self.messages)[-2000:]
        if self.failure or exit_code != 0 or not self.turns:
            message = self.failure or f"codex exited with {exit_code} before completing a turn."
            kind = classify_message(message) or "crashed"
            # Killed or died mid-turn: the turns it completed are paid for; the one it was in reported nothing.
            found = account_error(message) if kind in ("auth", "rate_limit", "quota") else None
            return RunResult("failed", summary=summary, tokens=self.usage, error_type=found.kind if found else kind,
                             error_message=message, resets_at=found.resets_at if found else None,
                             partial=self.in_turn)
        return RunResult("completed", summary=summary, tokens=self.usage)
