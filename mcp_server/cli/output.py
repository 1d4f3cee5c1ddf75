"""What the terminal commands share: refusals, JSON output, the run's rich Console, task-state styles, durations."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, UTC
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import paths
from ..visible import visible

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

    from ..services import Services

# How each task state is highlighted: yellow waits on the user, red is held, green has an agent on it.
STYLES = {"AWAITING_APPROVAL": "bold yellow", "WAITING_INPUT": "bold yellow", "PAUSED": "yellow",
          "DEFINED": "cyan", "BLOCKED": "bold red", "FAILED": "bold red", "IN_PROGRESS": "green",
          "ASSIGNED": "green", "VERIFYING": "green", "COMPLETED": "dim"}

# The columns a run lays its text out in; None asks the terminal (or COLUMNS). Tests fix it (`cli.run`).
_width: int | None = None


class CliError(Exception):
    """A refusal the CLI prints as one sentence (with what to do) and exits 1 on."""


@contextmanager
def at_width(width: int | None) -> Iterator[None]:
    """Lay out the text views in `width` columns while inside (None: as the terminal says)."""
    global _width
    before, _width = _width, width
    try:
        yield
    finally:
        _width = before


def console() -> Console:
    """The run's rich Console, on the current stdout (rich costs tens of ms to import: `--json` never asks)."""
    from rich.console import Console

    return Console(file=sys.stdout, width=_width)


def shown(text: str, style: str = "", multiline: bool = False) -> Text:
    """Text from the store (a task's, an agent's, a repo's) as a rich Text: no markup, no escapes act."""
    from rich.text import Text

    return Text(visible(text, multiline), style=style)


def status_text(status: str) -> Text:
    """A task status in its highlight."""
    from rich.text import Text

    return Text(status, style=STYLES.get(status, ""))


def open_services(home: Path) -> Services:
    """The store of `home` for reading; refuses (rather than creating an empty one) when there is none."""
    from .. import settings
    from .reads import no_data

    try:
        url = settings.store_url(home)  # a team's PostgreSQL queue has no file in the home
    except settings.ConfigError:
        url = "?"  # Services says the file's own sentence, once
    if not url and not paths.db_path(home).exists():
        raise CliError(no_data(home))
    from ..services import Services
    from ..store.base import StoreNotMigrated
    from .reads import may_migrate, not_migrated

    try:
        return Services(home, migrate=may_migrate(home, url if url != "?" else None))
    except StoreNotMigrated as error:
        raise CliError(not_migrated(home, url, error)) from None


def call_daemon_tool(home: Path, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A tool call through the daemon (started if needed), with the same checks as a model's; asks on a terminal."""
    from ..daemon_client import DaemonError, ToolError, call_tool, terminal_asker

    try:
        return call_tool(home, tool, arguments, ask=terminal_asker())
    except (ToolError, DaemonError) as error:
        raise CliError(str(error)) from None


def say(text: str) -> None:
    """One outcome line, made visible and wrapped to the run's width between words: an id is never cut, and a
    narrow terminal never breaks a word where it happens to reach the edge."""
    import shutil
    import textwrap

    width = _width or shutil.get_terminal_size().columns
    print(textwrap.fill(visible(text), max(20, width), break_long_words=False, break_on_hyphens=False))


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
    return None if moment is None else max(0.0, (datetime.now(UTC) - moment).total_seconds())


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
