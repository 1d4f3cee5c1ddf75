"""Watchdog: a run that goes silent is stalled; one that goes round in circles is looping.

Each tool call is hashed as `tool + sha256(stable JSON of its arguments)`, each tool result as
`sha256(its text)`, over a sliding window of the last 30 calls. Three patterns:

- **repeat**: the same call 10 times in the window is a warning, 20 times a kill;
- **ping-pong**: two calls alternating (A, B, A, B, …) with unchanged results: 8 calls warn, 16 kill;
- **no progress**: the same call giving the same result, back to back: 6 in a row warn, 12 kill.

A warning reaches the model in the same run where the CLI has a channel for it (Claude Code's
stream-json, Codex's `turn/steer`), and the log everywhere; a kill stops the run as `loop`.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter, deque
from dataclasses import dataclass
from typing import Any, Literal

Verdict = Literal["ok", "warn", "kill"]


@dataclass(frozen=True)
class WatchdogLimits:
    stall_seconds: float = 600.0
    timeout_seconds: float = 3600.0
    loop_window: int = 30
    loop_warn: int = 10
    loop_kill: int = 20
    ping_pong_warn: int = 8
    ping_pong_kill: int = 16
    no_progress_warn: int = 6
    no_progress_kill: int = 12


@dataclass(frozen=True)
class Finding:
    verdict: Verdict
    pattern: str = ""  # repeat | ping-pong | no progress
    count: int = 0
    message: str = ""  # for the model and the log


def call_hash(tool: str | None, args: Any) -> str:
    try:
        stable = json.dumps(args, sort_keys=True, separators=(",", ":"), default=str)
    except (TypeError, ValueError):
        stable = str(args)
    return f"{tool}:{hashlib.sha256(stable.encode()).hexdigest()}"


class LoopDetector:
    def __init__(self, limits: WatchdogLimits) -> None:
        self.limits = limits
        self.calls: deque[str] = deque(maxlen=limits.loop_window)
        self.results: deque[str | None] = deque(maxlen=limits.loop_window)  # one per call, None until it arrives
        self.warned: set[str] = set()
        self.last_tool: str | None = None

    def observe(self, tool: str | None, args: Any) -> Finding:
        """Record a call; the most severe pattern it completes wins."""
        key = call_hash(tool, args)
        self.calls.append(key)
        self.results.append(None)
        self.last_tool = tool
        return self._judge(key)

    def observe_result(self, text: str) -> None:
        """The result of the latest call still waiting for one."""
        digest = hashlib.sha256(text.encode(errors="replace")).hexdigest()
        for index in range(len(self.results) - 1, -1, -1):
            if self.results[index] is None:
                self.results[index] = digest
                return

    def _judge(self, key: str) -> Finding:
        findings = [self._repeat(key), self._ping_pong(), self._no_progress()]
        kills = [f for f in findings if f.verdict == "kill"]
        if kills:
            return kills[0]
        for finding in findings:
            if finding.verdict == "warn" and key not in self.warned:
                # One warning per call (both calls of a ping-pong): a second one would only be noise.
                self.warned.update(list(self.calls)[-2:] if finding.pattern == "ping-pong" else [key])
                return finding
        return Finding("ok")

    def _finding(self, pattern: str, count: int, warn: int, kill: int, what: str) -> Finding:
        if count >= kill:
            return Finding("kill", pattern, count, f"AgentQueue watchdog: {what} ({count} times); the run is stopped.")
        if count >= warn:
            return Finding("warn", pattern, count,
                           f"AgentQueue watchdog: {what} ({count} times) and nothing seems to change. Stop repeating "
                           "it: try a different approach, or finish and say what blocks you. If it goes on, the run "
                           "is stopped.")
        return Finding("ok")

    def _repeat(self, key: str) -> Finding:
        count = Counter(self.calls)[key]
        return self._finding("repeat", count, self.limits.loop_warn, self.limits.loop_kill,
                             f"you made the same {self.last_tool} call again")

    def _ping_pong(self) -> Finding:
        """The alternating tail A, B, A, B…: each call equals the one two before it, with the same result."""
        calls, results = list(self.calls), list(self.results)
        if len(calls) < 3 or calls[-1] == calls[-2]:
            return Finding("ok")
        count = 2
        for j in range(len(calls) - 1, 1, -1):
            if calls[j] != calls[j - 2] or None not in (results[j], results[j - 2]) and results[j] != results[j - 2]:
                break
            count += 1
        return self._finding("ping-pong", count if count > 2 else 0, self.limits.ping_pong_warn,
                             self.limits.ping_pong_kill, "you are alternating between the same two calls")

    def _no_progress(self) -> Finding:
        """The tail of identical calls whose results did not change."""
        calls, results = list(self.calls), list(self.results)
        count = 1
        for j in range(len(calls) - 2, -1, -1):
            if calls[j] != calls[-1] or results[j] is None:
                break
            if results[j + 1] is not None and results[j + 1] != results[j]:
                break
            count += 1
        return self._finding("no progress", count if count > 2 else 0, self.limits.no_progress_warn,
                             self.limits.no_progress_kill,
                             f"the same {self.last_tool} call keeps giving the same result")
