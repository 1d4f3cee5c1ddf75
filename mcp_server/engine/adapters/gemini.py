"""Gemini CLI (`gemini -o stream-json --approval-mode yolo --skip-trust --prompt=…`), prompt as one argument.

`yolo`, not `auto_edit`: in headless runs 0.61.0 only declares the tools that need no confirmation, and
`auto_edit` approves just the edit tools (write_file, replace), so `run_shell_command` is never offered
(tests/test_gemini_cli.py). The CLI appends `RATE_LIMIT_ADVICE` (which says "quota") to every HTTP 429's
message, so the error is classified from the text before it.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from . import acp
from .base import AgentConfig, AgentEvent, RunResult, RunSpec, classify_message, load_json, tokens
from .limits import AccountError, reset_time

RATE_LIMIT_ADVICE = "\nPlease wait and try again later."


def classify_error(message: str) -> str | None:
    head, advice, _ = message.partition(RATE_LIMIT_ADVICE)
    kind = classify_message(head)
    return "rate_limit" if advice and kind not in ("auth", "quota") else kind


# Gemini asks no host about single calls. Headless, `plan` offers only read tools; `auto_edit` edits
# but has no shell; `yolo` has everything. `standard` needs the shell (tests, builds): yolo.
APPROVAL = {"readonly": "plan", "standard": "yolo", "autonomous": "yolo"}


def build(config: AgentConfig, prompt: str, context: str, mcp_config: dict[str, Any] | None) -> RunSpec:
    """Gemini through its ACP mode (acp_presets.py "gemini"), under every preset: each call it would confirm is a
    `session/request_permission` the policy decides, its reads and writes go through fs/*, and AgentQueue's MCP
    server is in session/new (issue 24)."""
    return acp.build(dataclasses.replace(config, command="gemini"), prompt, context, mcp_config, GeminiSession)


class GeminiSession(acp.AcpSession):
    """An ACP session with Gemini's early parking: its 429 and 401 retries show only on stderr."""

    def feed_stderr(self, line: str) -> None:
        if re.search(r"\b(401|403|429)\b|api key not valid|too many requests|resource_exhausted", line, re.IGNORECASE):
            kind = classify_error(line.strip())
            if self.account_error is None and kind in ("auth", "rate_limit", "quota"):
                self.account_error = AccountError(kind, line.strip(),  # type: ignore[arg-type]
                                                  reset_time(line) if kind != "auth" else None)


def build_headless(config: AgentConfig, prompt: str, context: str, mcp_config: dict[str, Any] | None) -> RunSpec:
    """The headless stream-json run (`--approval-mode`, no per-call questions) the engine used before issue 24;
    kept with GeminiParser as what tests/test_gemini_cli.py pins about the CLI's own output."""
    full = f"{context}\n\n{prompt}" if context else prompt
    argv = [config.binary or "gemini", "-o", "stream-json", "--approval-mode", APPROVAL.get(config.preset, "yolo"),
            "--skip-trust"]
    if config.model:
        argv += ["-m", config.model]
    # One argument: `-p <text>` fails when the text starts with "-" (a task that opens with a bullet).
    return RunSpec(argv=[*argv, f"--prompt={full}"], stdin=None)


class GeminiParser:
    def __init__(self) -> None:
        self.text: list[str] = []
        self.result: dict[str, Any] | None = None
        self.account_error: AccountError | None = None  # a failed login or a limit, at its first error line

    def feed(self, line: str) -> list[AgentEvent]:
        event = load_json(line)
        if event is None:
            return [AgentEvent("text", line.rstrip())] if line.strip() else []
        kind = event.get("type")
        if kind == "message" and event.get("role") == "assistant":
            self.text.append(event.get("content") or "")
            return [AgentEvent("text", event.get("content") or "")]
        if kind == "tool_use":
            return [AgentEvent("tool_call", tool=event.get("tool_name"), args=event.get("parameters"))]
        if kind == "tool_result":
            return [AgentEvent("tool_result", text=str(event.get("output"))[:2000])]
        if kind == "result":
            self.result = event
            if event.get("status") != "success":
                self._account((event.get("error") or {}).get("message") or "")
            return [AgentEvent("system", f"result: {event.get('status')}")]
        return []

    def feed_stderr(self, line: str) -> None:
        """Gemini retries a 429 by itself for minutes, saying so only on stderr ("Attempt 1 failed with status 429.
        Retrying with backoff..."): that first line parks the kind."""
        # Only a refused key or a limit: a 5xx is left to the CLI's own retries.
        if re.search(r"\b(401|403|429)\b|api key not valid|too many requests|resource_exhausted", line, re.IGNORECASE):
            self._account(line.strip())

    def _account(self, message: str) -> None:
        kind = classify_error(message) if message else None
        if self.account_error is None and kind in ("auth", "rate_limit", "quota"):
            self.account_error = AccountError(kind, message,  # type: ignore[arg-type]
                                              reset_time(message) if kind != "auth" else None)

    def finish(self, exit_code: int | None) -> RunResult:
        summary = "".join(self.text)[-2000:]
        if self.result is None:
            # Gemini reports usage only in its result event: a run that never got there used an unknown amount.
            return RunResult("failed", summary=summary, error_type="crashed",
                             error_message=f"gemini exited ({exit_code}) without a result event.", partial=True)
        stats = self.result.get("stats") or {}
        usage = tokens(stats.get("input"), stats.get("output_tokens"), stats.get("cached"), 0,
                       stats.get("total_tokens"))
        if self.result.get("status") != "success":
            message = (self.result.get("error") or {}).get("message") or "gemini reported an error"
            kind = classify_error(message) or "crashed"
            return RunResult("failed", summary=summary, tokens=usage, error_type=kind, error_message=message,
                             resets_at=reset_time(message) if kind in ("rate_limit", "quota") else None)
        return RunResult("completed", summary=summary, tokens=usage)
