"""When messages wait: quiet hours (held, then one digest when they end) and digest intervals."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from .config import NotifyConfig


def quiet(config: NotifyConfig, local: datetime) -> bool:
    """Whether `local` (the daemon's wall clock) falls in the quiet hours."""
    return config.quiet is not None and config.quiet.holds(local.hour * 60 + local.minute)


def _parse(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def digest_due(rows: list[dict[str, Any]], last_digest_at: str | None, interval: float, now: str) -> bool:
    """A URL's waiting rows go out as one digest now: at once when quiet hours held some (they just ended),
    else once `interval` passed since its last digest (or since the oldest row waits)."""
    due = [r for r in rows if not r.get("next_at") or r["next_at"] <= now]  # a failed digest waits its backoff
    if not due:
        return False
    if any(r["mode"] == "held" for r in due):
        return True
    since = last_digest_at or min(r["created_at"] for r in due)
    return (_parse(now) - _parse(since)).total_seconds() >= interval
