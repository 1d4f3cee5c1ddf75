"""Reading the event log (events are written by `Store.add_event` inside each change)."""

from __future__ import annotations

import json

from ..store.db import Store
from ..store.models import Event


class Events:
    def __init__(self, store: Store) -> None:
        self.store = store

    def recent(self, limit: int = 10, project_id: str | None = None, task_id: str | None = None,
               event_type: str | None = None) -> list[Event]:
        clauses, params = [], []
        for column, value in (("project_id", project_id), ("task_id", task_id)):
            if value is not None:
                clauses.append(f"{column} = ?")
                params.append(value)
        if event_type:
            # `task.*` selects a family of events.
            if event_type.endswith("*"):
                clauses.append("event_type LIKE ?")
                params.append(event_type[:-1].replace("%", "") + "%")
            else:
                clauses.append("event_type = ?")
                params.append(event_type)
        where = " AND ".join(clauses) or "1 = 1"
        rows = self.store.all(f"SELECT * FROM events WHERE {where} ORDER BY id DESC LIMIT ?", (*params, limit))
        return [Event(**{**r, "payload": json.loads(r["payload"] or "{}")}) for r in rows]
