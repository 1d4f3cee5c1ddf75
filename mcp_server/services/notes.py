"""Notes: markdown files in `<project workspace>/notes/`, one per title (the title's slug is the file name).

A note name is always a plain `<slug>.md` inside the notes folder: slugs keep only letters, digits
and dashes, and names given directly are refused unless they are a bare file name that resolves
inside the folder, so no title can reach another directory. Writes are atomic (temp file + rename).
"""

from __future__ import annotations

import os
import re
import tempfile
from datetime import datetime, UTC
from pathlib import Path
from typing import Any

from ..store.db import Store
from .errors import InvalidInputError, NotFoundError
from .limits import is_file_name
from .locks import folder_lock
from .projects import Projects


def note_slug(title: str) -> str:
    """`Design: API v2!` -> `design-api-v2`; refuses titles with nothing usable."""
    slug = re.sub(r"[^\w\s-]", "", title.lower(), flags=re.ASCII)
    slug = re.sub(r"[\s_]+", "-", slug)
    slug = re.sub(r"-{2,}", "-", slug).strip("-")[:100].rstrip("-")
    if not slug:
        raise InvalidInputError(f"The title {title!r} has no letters or digits to name a note file with.")
    return slug


def _title_of(path: Path) -> str:
    try:
        with path.open(encoding="utf-8", errors="replace") as handle:
            first = handle.readline().strip()
    except OSError:
        first = ""
    if first.startswith("# "):
        return first[2:].strip()
    return path.stem.replace("-", " ").title()


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def within(folder: Path, path: Path) -> bool:
    """Whether `path`, with every symlink followed, is still directly in `folder` (itself followed)."""
    return Path(os.path.realpath(path)).parent == Path(os.path.realpath(folder))


def listing(folder: Path) -> list[dict[str, Any]]:
    """The folder's `.md` files; a link that leads out of the folder is left out (never read or stat'ed)."""
    if not folder.is_dir():
        return []
    out = []
    for path in sorted(folder.glob("*.md")):
        if not within(folder, path) or not path.is_file():
            continue
        stat = path.stat()
        out.append({"name": path.name, "title": _title_of(path), "size_bytes": stat.st_size,
                    "modified": datetime.fromtimestamp(stat.st_mtime, UTC).isoformat(timespec="seconds")
                    .replace("+00:00", "Z")})
    return out


class Notes:
    def __init__(self, store: Store, projects: Projects) -> None:
        self.store = store
        self.projects = projects

    def folder(self, project_id: str) -> Path:
        """`<workspace>/notes`, refused when it is a link: every note operation would act wherever it points."""
        folder = Path(self.projects.get(project_id).workspace) / "notes"
        if folder.is_symlink():
            raise InvalidInputError(f"{folder} is a symbolic link; notes must live in the project's own folder. "
                                    "Replace the link with a real folder (move the notes into it).")
        return folder

    def _inside(self, folder: Path, name: str) -> Path | None:
        """`folder/name` if name is a bare file name whose real path stays in the folder."""
        if not name or "/" in name or "\\" in name or name in (".", "..") or "\0" in name:
            return None
        path = folder / name
        return path if within(folder, path) else None

    def resolve(self, project_id: str, title: str, *, must_exist: bool = True) -> Path:
        """By file name (`x.md`), by name without `.md`, or by title (its slug)."""
        if not title or not title.strip():
            raise InvalidInputError("title is empty. Give a note title or its file name (list_notes shows them).")
        folder = self.folder(project_id)
        title = title.strip()
        for name in (title, f"{title}.md", f"{note_slug(title)}.md"):
            if not name.endswith(".md") or not is_file_name(name):  # a title no file can have: found by slug
                continue
            path = self._inside(folder, name)
            if path is not None and path.is_file():
                return path
        if must_exist:
            raise NotFoundError(f"No note {title!r} in project '{project_id}'. list_notes shows the notes.")
        fresh = folder / f"{note_slug(title)}.md"
        if fresh.is_symlink():  # a link out of the folder (one inside was found above): never read through it
            raise InvalidInputError(f"Note file {fresh.name} is a symbolic link out of the notes folder; AgentQueue "
                                    "does not follow it. Remove the link, or write_note to replace it.")
        return fresh

    def list(self, project_id: str) -> list[dict[str, Any]]:
        return listing(self.folder(project_id))

    def read(self, project_id: str, title: str) -> dict[str, Any]:
        path = self.resolve(project_id, title)
        return {"name": path.name, "title": _title_of(path), "content": path.read_text(encoding="utf-8")}

    def write(self, project_id: str, title: str, content: str) -> dict[str, Any]:
        folder = self.folder(project_id)
        path = folder / f"{note_slug(title)}.md"
        with folder_lock(folder):
            status = "updated" if path.exists() or path.is_symlink() else "created"
            write_atomic(path, content)  # replaces a link itself, never what it points to
        self._event(project_id, path, status)
        return {"name": path.name, "title": title.strip(), "status": status}

    def append(self, project_id: str, title: str, content: str) -> dict[str, Any]:
        folder = self.folder(project_id)
        with folder_lock(folder):  # read-modify-write: concurrent appends (threads, daemon + standalone) queue here
            path = self.resolve(project_id, title, must_exist=False)
            if path.exists():
                existing = path.read_text(encoding="utf-8")
                write_atomic(path, existing.rstrip("\n") + "\n\n" + content)
                status = "appended"
            else:
                write_atomic(path, f"# {title.strip()}\n\n{content}")
                status = "created"
            size = path.stat().st_size
        self._event(project_id, path, status)
        return {"name": path.name, "status": status, "size_bytes": size}

    def delete(self, project_id: str, title: str) -> str:
        path = self.resolve(project_id, title)
        path.unlink()
        with self.store.transaction():
            self.store.add_event("note.deleted", project_id=project_id, payload={"name": path.name})
        return path.name

    def _event(self, project_id: str, path: Path, status: str) -> None:
        with self.store.transaction():
            self.store.add_event("note.written", project_id=project_id,
                                 payload={"name": path.name, "status": status, "size_bytes": path.stat().st_size})

    def compare_specs(self, project_id: str, specs_path: Path | None) -> dict[str, Any]:
        """Spec files beside notes, for the model to compare (no LLM here)."""
        if specs_path is None:
            repos = self.store.all("SELECT checkout_path FROM repos WHERE project_id = ? ORDER BY created_at",
                                   (project_id,))
            found = [Path(r["checkout_path"]) / "specs" for r in repos if (Path(r["checkout_path"]) / "specs").is_dir()]
            specs_path = found[0] if found else Path(self.projects.get(project_id).workspace) / "specs"
        if specs_path.is_symlink() and not Path(os.path.realpath(specs_path)).is_relative_to(
                os.path.realpath(specs_path.parent)):
            raise InvalidInputError(f"{specs_path} is a symbolic link out of its repo or workspace; AgentQueue does "
                                    "not follow it. Pass specs_path, or replace the link with a folder.")
        notes = self.folder(project_id)
        strip = ("modified",)
        return {"project_id": project_id, "specs_path": str(specs_path), "notes_path": str(notes),
                "specs": [{k: v for k, v in e.items() if k not in strip} for e in listing(specs_path)],
                "notes": [{k: v for k, v in e.items() if k not in strip} for e in listing(notes)]}
