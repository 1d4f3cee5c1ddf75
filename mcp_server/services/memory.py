"""Project memory: `memory/MEMORY.md` (long-term) and daily notes `memory/YYYYMM/YYYYMMDD.md`.

Completed tasks append a line to today's note; agents' prompts and the `agent_context` prompt get
the long-term memory plus the last three days, capped in size (MEMORY.md whole when it is at most half
the cap, then the newest daily text). `write_memory` (and a task's agent, through its toolset) appends
to or replaces `MEMORY.md`, capped at MEMORY_CAP so every agent sees all of it; a link placed at its
path is replaced, never followed.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta, UTC
from pathlib import Path

from typing import Any

from .errors import InvalidInputError
from .locks import folder_lock
from .notes import within, write_atomic
from .projects import Projects

LONG_TERM = "MEMORY.md"  # in a project's memory folder
CONTEXT_CAP = 8000  # characters of memory put into an agent's context
TRIMMED = "[older notes trimmed]\n"
SEPARATOR = "\n\n---\n\n"
MEMORY_CAP = 3900  # characters of MEMORY.md: with its heading, half of CONTEXT_CAP at most (context() keeps it whole)


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

    def read_long_term(self, project_id: str) -> str:
        path = self.long_term_path(project_id)
        return _read_inside(path)

    def as_note(self, project_id: str) -> dict[str, Any]:
        """MEMORY.md as read_note answers a note (`read_note title=MEMORY.md`, the project's memory resource)."""
        text = self.read_long_term(project_id)
        return {"name": LONG_TERM, "title": "Project memory",
                "content": text or f"(MEMORY.md is empty; write_memory adds to it, up to {MEMORY_CAP:,} characters)"}

    def write(self, project_id: str, content: str, mode: str = "append") -> dict[str, Any]:
        """Append `content` to MEMORY.md (as a new paragraph) or replace it; refused past MEMORY_CAP with what to
        do. The result says the size, so a model knows how much room is left."""
        if mode not in ("append", "replace"):
            raise InvalidInputError(f"mode {str(mode)[:40]!r} is unknown; use append (add a paragraph) or replace "
                                    "(rewrite the whole memory).")
        if "\0" in content:
            raise InvalidInputError("content contains a NUL character; give plain markdown text.")
        content = content.strip()
        if not content and mode == "append":
            raise InvalidInputError("content is empty: give the fact or decision to remember.")
        path = self.long_term_path(self._project(project_id))
        with folder_lock(path.parent):  # read-modify-write: two agents remembering at once both land
            if path.is_symlink():
                path.unlink()  # a link placed here is replaced, never written through
            current = _read_inside(path)
            old = current if mode == "append" else ""
            text = (old.rstrip("\n") + "\n\n" + content if old.strip() else content) + "\n"
            if len(text) > MEMORY_CAP:
                # The whole memory as it is (at most the cap): a shorter one can be written from it at once.
                raise InvalidInputError(
                    f"MEMORY.md would be {len(text):,} characters; the cap is {MEMORY_CAP:,} (every agent's prompt "
                    f"carries all of it). Call write_memory with mode=replace and a shorter memory, and keep the "
                    f"details in a note. It now holds {len(current):,} characters:\n\n{current.strip()}")
            write_atomic(path, text if content else "")
        store = self.projects.store
        with store.transaction():
            store.add_event("memory.written", project_id=project_id, payload={"mode": mode, "size": len(text)})
        written = {"project_id": project_id, "mode": mode, "size_chars": len(text) if content else 0,
                   "cap_chars": MEMORY_CAP}
        if mode == "replace" and current.strip():
            written["replaced"] = current.strip()  # what the model overwrote, so nothing is lost unseen
        return written

    def _project(self, project_id: str) -> str:
        folder = self.folder(project_id)
        if folder.is_symlink():  # the memory folder itself must be the workspace's own
            raise InvalidInputError(f"{folder} is a symbolic link; AgentQueue writes memory only in the project's own "
                                    "workspace. Remove the link.")
        return project_id

    def context(self, project_id: str, days: int = 3, cap: int = CONTEXT_CAP, today: date | None = None) -> str:
        """`## Long-term Memory` + `## Recent Daily Notes` (last `days`), trimmed to `cap` characters."""
        parts = []
        folder = self.folder(project_id)  # read once: each read is a query of the project
        long_term = _read_inside(folder / LONG_TERM).strip()
        if long_term:
            parts.append("## Long-term Memory\n\n" + long_term)
        today = today or datetime.now(UTC).date()
        daily = []
        for offset in range(days - 1, -1, -1):
            path = _daily(folder, today - timedelta(days=offset))
            if _read_inside(path).strip():
                daily.append(_read_inside(path).strip())
        if daily:
            parts.append("## Recent Daily Notes\n\n" + "\n\n---\n\n".join(daily))
        text = SEPARATOR.join(parts)
        if len(text) > cap:
            if long_term and daily and len(parts[0]) <= cap // 2:  # MEMORY.md whole, then the newest daily notes
                keep = cap - len(parts[0]) - len(SEPARATOR) - len(TRIMMED)
                text = parts[0] + SEPARATOR + TRIMMED + parts[1][-keep:]
            else:
                text = "[older memory trimmed]\n" + text[-cap:]
        return text


def _read_inside(path: Path) -> str:
    """A memory file's text, or "" when it is missing or a link that leads out of its folder (never read)."""
    if not path.is_file() or not within(path.parent, path):
        return ""
    return path.read_text(encoding="utf-8", errors="replace")


def _daily(folder: Path, day: date) -> Path:
    """A day's notes in a project's memory folder: YYYYMM/YYYYMMDD.md."""
    return folder / day.strftime("%Y%m") / f"{day.strftime('%Y%m%d')}.md"
