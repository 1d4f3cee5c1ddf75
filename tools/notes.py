"""Note tools: markdown notes in a project's workspace (`notes/<slug>.md`)."""

from pathlib import Path
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context
from pydantic import BaseModel, Field

from ..services import result_size
from ..services.memory import LONG_TERM

from .registry import Name, Noted, Offset, PathText, ProjectId, client_state, project_for, services, tool


class NoteInfo(BaseModel):
    name: str
    title: str
    size_bytes: int
    modified: str | None = None


class NoteList(Noted):
    project_id: str
    notes: list[NoteInfo]


class NoteWritten(BaseModel):
    name: str
    title: str
    status: str


class NoteContent(Noted):
    name: str
    title: str
    content: str
    total_chars: int = 0
    truncated: bool = False


class NoteAppended(BaseModel):
    name: str
    status: str
    size_bytes: int


class MemoryWritten(BaseModel):
    project_id: str
    mode: str
    size_chars: int
    cap_chars: int
    replaced: str | None = None  # mode=replace: the memory it replaced


class NoteDeleted(BaseModel):
    deleted: str


class SpecsAndNotes(BaseModel):
    project_id: str
    specs_path: str
    notes_path: str
    specs: list[dict[str, Any]]
    notes: list[dict[str, Any]]


@tool(read_only=True)
def list_notes(ctx: Context, project_id: ProjectId = None) -> NoteList:
    """List a project's notes."""
    project = project_for(ctx, project_id)
    return NoteList(project_id=project, notes=services(ctx).notes.list(project))


@tool(destructive=True)
def write_note(ctx: Context, title: Name, content: str, project_id: ProjectId = None) -> NoteWritten:
    """Create or overwrite a note (file name = slug of the title)."""
    return NoteWritten(**services(ctx).notes.write(project_for(ctx, project_id), title, content))


@tool(read_only=True)
def read_note(ctx: Context, title: Name, project_id: ProjectId = None,
              offset: Annotated[Offset, Field(description="in characters")] = 0) -> NoteContent:
    """Read a note by title or file name (MEMORY.md: the project's memory); paged."""
    svc, project = services(ctx), project_for(ctx, project_id)
    found = svc.memory.as_note(project) if title.strip() == LONG_TERM else svc.notes.read(project, title)
    part = result_size.page(found["content"], offset)
    note = None
    if part.next_offset is not None:
        note = f"{part.span()} shown; call read_note with offset={part.next_offset} for the next part."
    elif part.offset:
        note = f"{part.span()} shown (the end)."
    return NoteContent(name=found["name"], title=found["title"], content=part.text, total_chars=part.total,
                       truncated=part.next_offset is not None, note=note)


@tool()
def append_note(ctx: Context, title: Name, content: str, project_id: ProjectId = None) -> NoteAppended:
    """Append to a note (created with a '# Title' heading if missing)."""
    return NoteAppended(**services(ctx).notes.append(project_for(ctx, project_id), title, content))


@tool(destructive=True)
def write_memory(ctx: Context, content: str, mode: Literal["append", "replace"] = "append",
                 project_id: ProjectId = None) -> MemoryWritten:
    """Add to (or replace) the project's MEMORY.md, which every agent's prompt includes; capped."""
    svc, parent = services(ctx), client_state(ctx).options.get("task_id")
    if parent and not project_id and not client_state(ctx).active_project:
        project_id = svc.tasks.get(parent).project_id  # a task's agent remembers for its own project
    return MemoryWritten(**svc.memory.write(project_for(ctx, project_id), content, mode))


@tool(destructive=True)
def delete_note(ctx: Context, title: Name, project_id: ProjectId = None) -> NoteDeleted:
    """Delete a note."""
    return NoteDeleted(deleted=services(ctx).notes.delete(project_for(ctx, project_id), title))


@tool(read_only=True)
def compare_specs_notes(ctx: Context, project_id: ProjectId = None,
                        specs_path: PathText | None = None) -> SpecsAndNotes:
    """Spec files (specs_path, or specs/) beside the notes, to compare."""
    svc = services(ctx)
    project = project_for(ctx, project_id)
    specs = None
    if specs_path:
        specs = svc.files.resolve(specs_path, Path(svc.projects.get(project).workspace))
    return SpecsAndNotes(**svc.notes.compare_specs(project, specs))
