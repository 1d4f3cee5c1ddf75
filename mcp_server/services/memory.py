"""Project memory: `memory/MEMORY.md` (long-term) and daily notes `memory/YYYYMM/YYYYMMDD.md`.

Completed tasks append a line to today's note; agents' prompts and the `agent_context` prompt get
the long-term memory plus the last three days, capped in size (the newest text is kept).
"""

from __future__ import annotations

from datetime import date, datetime, timedelta, UTC
from pathlib import Path

from .locks import folder_lock
from .notes import write_atomic
from .projects import Projects

LONG_TERM = "MEMORY.md"  # in a project's memory folder
CONTEXT_CAP = 8000  # characters of memory put into an agent's context


class Memory:
    def __init__(self, projects: Projects) -> None:
        self.projects = projects

    def folder(self, project_id: str) -> Path:
        return Path(self.projects.get(project_id).workspace) / "memory"

    def long_term_path(self, project_id: str) -> Path:
        return self.folder(project_id) / LONG_TERM

    def daily_path(self, project_id: str, day: date) -> Path:
        return _daily(self.folder(project_id), day)

    def append_today(self, project_id: str, line: str, now: datetime | None = None) -> Path:
        now = now or datetime.now(UTC)
        path = self.daily_path(project_id, now.date())
        with folder_lock(path.parent):  # two tasks completing together must both be recorded
            if path.is_symlink():
                path.unlink()  # a link placed here is replaced, never read through
            if path.exists():
                text = path.read_text(encoding="utf-8").rstrip("\n") + "\n" + line.rstrip("\n") + "\n"
            else:
                text = f"# {now.date().isoformat()}\n\n{line.rstrip()}\n"
            write_atomic(path, text)
        return path

    def context(self, project_id: str, days: int = 3, cap: int = CONTEXT_CAP, today: date | None = None) -> str:
        """`## Long-term Memory` + `## Recent Daily Notes` (last `days`), trimmed to `cap` characters."""
        parts = []
        folder = self.folder(project_id)  # read once: each read is a query of the project
        long_term = folder / LONG_TERM
        if long_term.is_file() and long_term.read_text(encoding="utf-8").strip():
            parts.append("## Long-term Memory\n\n" + long_term.read_text(encoding="utf-8").strip())
        today = today or datetime.now(UTC).date()
        daily = []
        for offset in range(days - 1, -1, -1):
            path = _daily(folder, today - timedelta(days=offset))
            if path.is_file():
                daily.append(path.read_text(encoding="utf-8").strip())
        if daily:
            parts.append("## Recent Daily Notes\n\n" + "\n\n---\n\n".join(daily))
        text = "\n\n---\n\n".join(parts)
        if len(text) > cap:
            text = "[older memory trimmed]\n" + text[-cap:]
        return text


def _daily(folder: Path, day: date) -> Path:
    """A day's notes in a project's memory folder: YYYYMM/YYYYMMDD.md."""
    return folder / day.strftime("%Y%m") / f"{day.strftime('%Y%m%d')}.md"
