"""Watchdog: a run that goes silent is stalled; one that repeats the same tool call is looping.

Loop detection hashes each call as `tool + sha256(stable JSON of its arguments)` over a sliding
window of the last 30 calls: the same call 10 times is a warning, 20 times a kill.
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


def call_hash(tool: str | None, args: Any) -> str:
    try:
        stable = json.dumps(args, sort_keys=True, separators=(",", ":"), default=str)
    except (TypeError, ValueError):
        stable = str(args)
    return f"{tool}:{hashlib.sha256(stable.encode()).hexdigest()}"


class LoopDetector:
    def __init__(self, limits: WatchdogLimits) -> None:
        self.limits = limits
        self.window: deque[str] = deque(maxlen=limits.loop_window)
        self.warned: set[str] = set()

    def observe(self, tool: str | None, args: Any) -> tuple[Verdict, int]:
        """Record a call; returns the verdict and how often this exact call is in the window."""
        key = call_hash(tool, args)
        self.window.append(key)
        count = Counter(self.window)[key]
        if count >= self.limits.loop_kill:
            return "kill", count
        if count >= self.limits.loop_warn and key not in self.warned:
            self.warned.add(key)
            return "warn", count
        return "ok", count
