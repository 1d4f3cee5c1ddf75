"""Logging: stderr plus a rotating file under $AGENTQUEUE_HOME/logs; never stdout (it may be the MCP wire)."""

from __future__ import annotations

import logging
import logging.handlers
import sys
from pathlib import Path

from . import paths


def configure(home: Path, name: str, level: int = logging.INFO) -> Path:
    """Route all logging to stderr and `<home>/logs/<name>.log`; returns the log file."""
    log_dir = paths.logs_dir(home)
    paths.private_dir(home)
    paths.private_dir(log_dir)
    log_file = paths.private_file(log_dir / f"{name}.log")
    formatter = logging.Formatter("%(asctime)s %(levelname)s %(name)s [%(process)d] %(message)s")
    file_handler = logging.handlers.RotatingFileHandler(log_file, maxBytes=5_000_000, backupCount=3)
    stderr_handler = logging.StreamHandler(sys.stderr)
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in (file_handler, stderr_handler):
        handler.setFormatter(formatter)
        root.addHandler(handler)
    root.setLevel(level)
    # The SDK logs each refused tool call at INFO; that is the caller's business, not ours.
    logging.getLogger("mcp").setLevel(logging.WARNING)
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
    return log_file
