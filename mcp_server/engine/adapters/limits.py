"""Logins and usage limits seen in an agent's stream: what parks its kind (engine/parking.py) and until when.

Each adapter recognises its CLI's own error events; this module holds what they share: the AccountError they
report at the first error line, and reading a reset time out of an error text ("resets at 3pm", "resets 3pm
(Europe/Paris)", "try again in 5 minutes", "retry-after: 5", an epoch after a `|`, a `resets_at` value).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

ParkReason = Literal["auth", "rate_limit", "quota"]
PARKING_ERRORS: tuple[str, ...] = ("auth", "rate_limit", "quota")


@dataclass
class AccountError:
    """A login that failed or a usage limit, seen in a run's stream: the run stops and its agent kind parks."""

    kind: ParkReason
    message: str
    resets_at: float | None = None  # epoch seconds, when the error said when the limit resets


_UNITS = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60, "h": 3600, "hr": 3600, "hour": 3600,
          "d": 86400, "day": 86400}
_CLOCK = re.compile(r"\b(?:resets?|try again|available again)(?: at| after)?\s+(\d{1,2})(?::(\d{2}))?\s*([ap]\.?m\.?)?"
                    r"(?:\s*\(([^)]+)\))?", re.IGNORECASE)
_IN = re.compile(r"\b(?:resets?|try again|retry)\s+in\s+((?:\d+(?:\.\d+)?\s*[a-z]+[\s,]*(?:and\s+)?)+)", re.IGNORECASE)
_AFTER = re.compile(r"\bretry[-_ ]after\W{0,3}(\d+(?:\.\d+)?)", re.IGNORECASE)
_EPOCH = re.compile(r"\|(\d{10})\b")  # Claude's "usage limit reached|1767225600"


def _zone(name: str | None) -> Any:
    """The named time zone ("UTC", "Europe/Paris"), else the machine's (the CLI printed the time in it)."""
    if name:
        try:
            from zoneinfo import ZoneInfo

            return ZoneInfo(name.strip())
        except Exception:  # an unknown name: the local zone is the best guess
            pass
    return datetime.now().astimezone().tzinfo


def reset_time(text: str, now: float | None = None) -> float | None:
    """Epoch seconds at which the limit `text` describes resets, when it says; None otherwise."""
    now = time.time() if now is None else now
    if match := _EPOCH.search(text):
        return float(match.group(1))
    if match := _AFTER.search(text):
        return now + float(match.group(1))
    if match := _IN.search(text):
        total = 0.0
        for amount, unit in re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]+)", match.group(1), re.IGNORECASE):
            key = unit.lower().rstrip("s") if len(unit) > 1 else unit.lower()
            if key not in _UNITS:
                break
            total += float(amount) * _UNITS[key]
        if total:
            return now + total
    if match := _CLOCK.search(text):
        hour, minute, meridiem, zone = int(match.group(1)), int(match.group(2) or 0), match.group(3), match.group(4)
        if meridiem:
            hour = hour % 12 + (12 if meridiem.lower().startswith("p") else 0)
        if hour > 23 or minute > 59:
            return None
        tz = _zone(zone)
        current = datetime.fromtimestamp(now, tz)
        at = current.replace(hour=hour, minute=minute, second=0, microsecond=0)
        if at <= current:
            at += timedelta(days=1)  # "resets 3pm" said after 3pm: tomorrow's
        return at.timestamp()
    return None


def epoch(value: Any) -> float | None:
    """A `resets_at`-like value as epoch seconds: a number (seconds, or milliseconds) or an ISO time."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value) / (1000 if value > 1e11 else 1)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return float(value) if value.replace(".", "", 1).isdigit() else None
    return None


def resets_in_event(event: Any) -> float | None:
    """The first reset time an event carries anywhere (`resets_at`, `resetsAt`, `resets_in_seconds`)."""
    if isinstance(event, dict):
        for key in ("resets_at", "resetsAt", "reset_at"):
            if key in event and (at := epoch(event[key])) is not None:
                return at
        for key in ("resets_in_seconds", "retry_after"):
            if isinstance(event.get(key), (int, float)) and not isinstance(event.get(key), bool):
                return time.time() + float(event[key])
        values: Any = event.values()
    elif isinstance(event, list):
        values = event
    else:
        return None
    for value in values:
        if isinstance(value, (dict, list)) and (at := resets_in_event(value)) is not None:
            return at
    return None


def limit_kind(text: str) -> ParkReason:
    """A limit is a usage quota (hours or days away) when it says so, else a rate limit (seconds or minutes)."""
    lowered = text.lower()
    quota = ("usage limit", "quota", "billing", "credit balance", "limit reached", "hit your limit", "plan limit")
    return "quota" if any(word in lowered for word in quota) else "rate_limit"
