"""The last chat's Claude session id, kept (private) under AGENTQUEUE_HOME so `--resume` continues it."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from .. import paths

FILE = "chat_session.json"


def path(home: Path) -> Path:
    return home / FILE


def last_session(home: Path) -> dict[str, Any] | None:
    try:
        record = json.loads(path(home).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and isinstance(record.get("session_id"), str) else None


def remember(home: Path, session_id: str, project: str | None) -> None:
    """Write the record atomically, readable by its owner only (a session id opens a transcript)."""
    paths.private_dir(home)
    target = path(home)
    tmp = target.with_name(f".{FILE}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump({"session_id": session_id, "project": project, "cwd": os.getcwd(), "updated_at": time.time()}, handle)
    os.replace(tmp, target)
