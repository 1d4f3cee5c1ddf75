"""The permission policy: the one place that decides whether a risky action may run.

Today it governs `run_command`: AGENTQUEUE_RUN_COMMAND=deny (read at each call) refuses it, for
users who want their model to read and queue but never execute. Default: allow.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import ServiceError


class PermissionDeniedError(ServiceError):
    """The policy refuses this action."""


def check_run_command(command: str, working_dir: Path) -> None:
    if os.environ.get("AGENTQUEUE_RUN_COMMAND", "allow").strip().lower() == "deny":
        raise PermissionDeniedError(
            "run_command is disabled by policy (AGENTQUEUE_RUN_COMMAND=deny for this AgentQueue daemon). "
            "Queue the work as a task for an agent instead, or ask the user to allow it."
        )
