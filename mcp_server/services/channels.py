"""Chat channels (Discord, Slack, an IDE window…) linked to projects; ids are the front end's own."""

from __future__ import annotations

from ..store.db import Store, now_iso
from ..store.models import Channel
from .errors import InvalidInputError
from .projects import Projects


def _clean(value: str, what: str) -> str:
    if not value or not value.strip():
        raise InvalidInputError(f"{what} is empty. Give the chat front end's {what}.")
    return value.strip()


class Channels:
    def __init__(self, store: Store, projects: Projects) -> None:
        self.store = store
        self.projects = projects

    def link(self, project_id: str, channel_id: str, channel_name: str | None = None,
             *, control: bool = False) -> str | None:
        """Link a channel to a project; returns the project it was linked to before, if another."""
        self.projects.require(project_id)
        channel_id = _clean(channel_id, "channel_id")
        previous = self.store.scalar("SELECT project_id FROM project_channels WHERE channel_id = ?", (channel_id,))
        with self.store.transaction() as db:
            if control:
                db.execute("UPDATE project_channels SET is_control = 0 WHERE project_id = ?", (project_id,))
            db.execute(
                "INSERT INTO project_channels (channel_id, project_id, channel_name, is_control, created_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT(channel_id) DO UPDATE SET project_id = excluded.project_id, "
                "channel_name = coalesce(excluded.channel_name, project_channels.channel_name), is_control = excluded.is_control",
                (channel_id, project_id, channel_name.strip() if channel_name else None, int(control), now_iso()),
            )
            self.store.add_event("channel.linked", project_id=project_id,
                                 payload={"channel_id": channel_id, "channel_name": channel_name,
                                          "control": control, "previous_project_id": previous})
        return previous if previous != project_id else None

    def set_control(self, project_id: str, channel_name: str) -> Channel:
        """Make a channel, named as the user sees it (`#ops` or `ops`), the project's control channel.

        A channel already known by that name keeps its id; otherwise the name itself becomes the id.
        """
        self.projects.require(project_id)
        name = _clean(channel_name, "channel_name").lstrip("#")
        if not name:
            raise InvalidInputError("channel_name has no name after '#'. Give a name such as '#ops'.")
        known = self.store.scalar(
            "SELECT channel_id FROM project_channels WHERE channel_name IN (?, ?) ORDER BY created_at LIMIT 1",
            (name, f"#{name}"))
        channel_id = known or f"#{name}"
        self.link(project_id, channel_id, f"#{name}", control=True)
        return Channel(channel_id=channel_id, channel_name=f"#{name}")

    def for_project(self, project_id: str) -> list[Channel]:
        self.projects.require(project_id)
        rows = self.store.all("SELECT channel_id, channel_name FROM project_channels WHERE project_id = ? "
                              "ORDER BY is_control DESC, created_at", (project_id,))
        return [Channel(**r) for r in rows]

    def project_for(self, channel_id: str) -> tuple[str | None, str | None]:
        channel_id = _clean(channel_id, "channel_id")
        row = self.store.one("SELECT p.id, p.name FROM project_channels c JOIN projects p ON p.id = c.project_id "
                             "WHERE c.channel_id = ?", (channel_id,))
        return (row["id"], row["name"]) if row else (None, None)
