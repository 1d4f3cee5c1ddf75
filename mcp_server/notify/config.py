"""`[notify]` in config.toml: where messages go, which events send them, quiet hours, digests, per-project overrides.

    [notify]
    urls = ["ntfy://ntfy.sh/my-queue", "json://127.0.0.1:9000/hook"]   (Apprise URLs)
    permission = "on"        # on | off | digest, per event kind (KINDS)
    completed = "digest"
    quiet_hours = "22:00-07:00"   # the daemon's local time; held messages go out as one digest when it ends
    digest_interval = "1h"
    board_url = "http://box.lan:8765"   # the board's address in messages (default: the daemon's own)

    [notify.projects."web"]   # a project's name or id: its own urls and kinds over the global ones
    urls = ["slack://…"]
    blocked = "off"

Imports nothing heavy: settings.py reads these keys with it at every start.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

# Event kinds a person may be told about, and what each is by default.
KINDS: dict[str, str] = {"permission": "on", "approval": "on", "blocked": "on", "failed": "on", "parked": "on",
                         "completed": "off"}
MODES = ("on", "off", "digest")
DEFAULT_DIGEST_SECONDS = 3600.0
_CLOCK = re.compile(r"\s*([01]?\d|2[0-3]):([0-5]\d)\s*-\s*([01]?\d|2[0-3]):([0-5]\d)\s*\Z")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://\S+\Z")
KEYS = ("urls", *KINDS, "quiet_hours", "digest_interval", "board_url", "projects")
PROJECT_KEYS = ("urls", *KINDS)


class NotifyConfigError(ValueError):
    """One sentence naming the key, what was wrong and what to write instead."""


@dataclass(frozen=True)
class QuietHours:
    start: int  # minutes after local midnight
    end: int

    def holds(self, minute_of_day: int) -> bool:
        """Whether messages wait at this local minute (a window may wrap past midnight)."""
        if self.start <= self.end:
            return self.start <= minute_of_day < self.end
        return minute_of_day >= self.start or minute_of_day < self.end

    def __str__(self) -> str:
        return f"{self.start // 60:02d}:{self.start % 60:02d}-{self.end // 60:02d}:{self.end % 60:02d}"


@dataclass(frozen=True)
class Route:
    """Where one project's events go: its URLs and the mode of each kind."""

    urls: tuple[str, ...]
    modes: dict[str, str]

    def mode(self, kind: str) -> str:
        return self.modes.get(kind, "off") if self.urls else "off"


@dataclass(frozen=True)
class NotifyConfig:
    urls: tuple[str, ...] = ()
    modes: dict[str, str] = field(default_factory=lambda: dict(KINDS))
    quiet: QuietHours | None = None
    digest_seconds: float = DEFAULT_DIGEST_SECONDS
    board_url: str | None = None
    projects: dict[str, dict[str, Any]] = field(default_factory=dict)  # name or id -> {"urls": …, kind: mode}

    @classmethod
    def from_values(cls, values: dict[str, Any]) -> NotifyConfig:
        """From Settings.notify (each key already checked by `parse_key`)."""
        modes = {kind: values.get(kind, default) for kind, default in KINDS.items()}
        return cls(urls=tuple(values.get("urls", ())), modes=modes, quiet=values.get("quiet_hours"),
                   digest_seconds=values.get("digest_interval", DEFAULT_DIGEST_SECONDS),
                   board_url=values.get("board_url"), projects=dict(values.get("projects", {})))

    @property
    def configured(self) -> bool:
        """Some URL is set, globally or for a project: someone can be told."""
        return bool(self.urls or any(p.get("urls") for p in self.projects.values()))

    def all_urls(self) -> list[str]:
        return list(dict.fromkeys([*self.urls, *(u for p in self.projects.values() for u in p.get("urls", ()))]))

    def route(self, project_id: str | None, project_name: str | None = None) -> Route:
        """The global settings with the project's override (by id first, then by name) on top."""
        override = self.projects.get(project_id or "") or self.projects.get(project_name or "") or {}
        urls = tuple(override.get("urls", self.urls))
        return Route(urls, {kind: override.get(kind, self.modes.get(kind, "off")) for kind in KINDS})


def parse_urls(raw: Any, where: str) -> tuple[str, ...]:
    items = [u.strip() for u in raw.split(",")] if isinstance(raw, str) else raw
    if not isinstance(items, list) or not all(isinstance(u, str) and _SCHEME.match(u.strip()) for u in items if u):
        raise NotifyConfigError(f"{where} = {raw!r} is not a list of Apprise URLs: give e.g. "
                                '["ntfy://ntfy.sh/my-topic", "json://host:port/path"] (one per service).')
    return tuple(u.strip() for u in items if u and u.strip())


def parse_mode(raw: Any, where: str) -> str:
    mode = raw.strip().lower() if isinstance(raw, str) else ("on" if raw is True else "off" if raw is False else None)
    if mode not in MODES:
        raise NotifyConfigError(f"{where} = {raw!r} is not a notification mode: write \"on\", \"off\" or \"digest\".")
    return mode


def parse_quiet_hours(raw: Any, where: str) -> QuietHours | None:
    if isinstance(raw, str) and raw.strip().lower() in ("", "off", "none"):
        return None
    match = _CLOCK.match(raw) if isinstance(raw, str) else None
    if not match:
        raise NotifyConfigError(f"{where} = {raw!r} is not a time window: write it as \"22:00-07:00\" "
                                "(24-hour local time, start-end), or \"off\".")
    start, end = int(match[1]) * 60 + int(match[2]), int(match[3]) * 60 + int(match[4])
    if start == end:
        raise NotifyConfigError(f"{where} = {raw!r} starts and ends at the same time: give a window such as "
                                "\"22:00-07:00\", or \"off\".")
    return QuietHours(start, end)


def parse_interval(raw: Any, where: str) -> float:
    from ..settings import duration_seconds  # settings imports this module: read lazily

    seconds = duration_seconds(raw)
    if seconds is None or not 10 <= seconds <= 7 * 86400:
        raise NotifyConfigError(f"{where} = {raw!r} is not a digest interval: give a duration from 10 s to 7 days, "
                                "e.g. \"30m\" or \"1h\".")
    return seconds


def parse_board_url(raw: Any, where: str) -> str:
    if not isinstance(raw, str) or not re.match(r"https?://[^\s/]+", raw.strip()):
        raise NotifyConfigError(f"{where} = {raw!r} is not the board's address: give http(s)://host:port, "
                                "e.g. \"http://box.lan:8765\".")
    return raw.strip().rstrip("/")


def parse_projects(raw: Any, where: str) -> dict[str, dict[str, Any]]:
    if not isinstance(raw, dict) or not all(isinstance(v, dict) for v in raw.values()):
        raise NotifyConfigError(f"{where} must hold one table per project, e.g. [notify.projects.\"web\"] with "
                                "urls = [...] or blocked = \"off\".")
    projects: dict[str, dict[str, Any]] = {}
    for name, table in raw.items():
        here = f"{where}.\"{name}\""
        unknown = sorted(set(table) - set(PROJECT_KEYS))
        if unknown:
            raise NotifyConfigError(f"{here}: unknown key(s) {', '.join(unknown)}; a project may set "
                                    f"{', '.join(PROJECT_KEYS)}.")
        projects[name] = {key: parse_urls(value, f"{here} urls") if key == "urls" else
                          parse_mode(value, f"{here} {key}") for key, value in table.items()}
    return projects


def parse_key(key: str, raw: Any, where: str) -> Any:
    """One `[notify]` key's value, or a NotifyConfigError naming `where`."""
    if key == "urls":
        return parse_urls(raw, where)
    if key in KINDS:
        return parse_mode(raw, where)
    if key == "quiet_hours":
        return parse_quiet_hours(raw, where)
    if key == "digest_interval":
        return parse_interval(raw, where)
    if key == "board_url":
        return parse_board_url(raw, where)
    if key == "projects":
        return parse_projects(raw, where)
    raise NotifyConfigError(f"{where}: unknown key {key!r}.")
