"""What the terminal commands share: opening the store read-side, JSON output, durations."""

from __future__ import annotations

import json
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import paths

if TYPE_CHECKING:
    from ..services import Services


class CliError(Exception):
    """A refusal the CLI prints as one sentence (with what to do) and exits 1 on."""


def open_services(home: Path) -> Services:
    """The store of `home` for reading; refuses (rather than creating an empty one) when there is none."""
    if not paths.db_path(home).exists():
        raise CliError(f"No AgentQueue data in {home} yet. Add it to a client (`agentqueue install claude-code`) "
                       "or start the daemon (`agentqueue serve`); set AGENTQUEUE_HOME if your data lives elsewhere.")
    from ..services import Services

    return Services(home)


def print_json(value: Any) -> None:
    """Machine-readable output: one JSON document on stdout (pydantic models dumped as dicts)."""
    # ensure_ascii: every control, escape and non-ASCII character of a title or log is a \uXXXX escape.
    sys.stdout.write(json.dumps(_plain(value), indent=2, default=str, ensure_ascii=True) + "\n")


def _plain(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def parse_iso(stamp: str | None) -> datetime | None:
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None


def seconds_since(stamp: str | None) -> float | None:
    moment = parse_iso(stamp)
    return None if moment is None else max(0.0, (datetime.now(timezone.utc) - moment).total_seconds())


def duration(seconds: float | None) -> str:
    """3s, 4m 05s, 2h 07m, 3d 04h."""
    if seconds is None:
        return "?"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 86400}d {s % 86400 // 3600:02d}h"
