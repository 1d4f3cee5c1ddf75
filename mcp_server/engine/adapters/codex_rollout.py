"""A Codex session's token totals from its rollout file, for the `codex` ACP preset (codex-acp).

codex-acp 0.16.0 (Codex 0.137.0 inside) sends no usage in its ACP `PromptResponse`, and its `usage_update` carries
only the context window's fill (`used` = the last call's input + output). Codex writes every session to
`$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<session id>.jsonl` (the ACP session id is Codex's thread id), and
each `token_count` event there holds `info.total_token_usage`: the whole session's input (cached included), cached
input, output (reasoning included) and total. The last one is the session's bill.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..run_files import read_tail
from .base import tokens

_SESSION_ID = re.compile(r"[0-9A-Za-z-]{1,100}\Z")


def codex_home(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    return Path(env.get("CODEX_HOME") or Path(env.get("HOME") or Path.home()) / ".codex")


def rollout(session_id: str, home: Path | None = None) -> Path | None:
    """The session's rollout file, or None (an id that is not one is never globbed)."""
    if not _SESSION_ID.match(session_id):
        return None
    found = sorted((home or codex_home()).glob(f"sessions/*/*/*/rollout-*-{session_id}.jsonl"))
    return found[-1] if found else None


def session_usage(session_id: str, home: Path | None = None) -> tuple[str | None, dict[str, int]] | None:
    """(the model, the session's tokens in the ledger's shape) from its last `token_count`, or None when there is
    none. OpenAI counts cached tokens inside input_tokens; the ledger's input is the uncached part."""
    path = rollout(session_id, home)
    # The run could write the rollout's folder: a FIFO, a device or a link there is no rollout (run_files.py).
    data = read_tail(path) if path is not None else None
    if data is None:
        return None
    model: str | None = None
    total: dict[str, Any] | None = None
    for line in data.decode("utf-8", errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # a line cut short while Codex wrote it
        payload = entry.get("payload") if isinstance(entry, dict) else None
        if not isinstance(payload, dict):
            continue
        if entry.get("type") == "turn_context" and isinstance(payload.get("model"), str):
            model = payload["model"]
        info = payload.get("info") if payload.get("type") == "token_count" else None
        if isinstance(info, dict) and isinstance(info.get("total_token_usage"), dict):
            total = info["total_token_usage"]
    if total is None:
        return None
    cached = int(total.get("cached_input_tokens") or 0)
    return model, tokens(int(total.get("input_tokens") or 0) - cached, total.get("output_tokens"), cached, 0,
                         total.get("total_tokens"))


def run_usage(session_id: str, run_env: Mapping[str, str] | None) -> tuple[str | None, dict[str, int]] | None:
    """session_usage in the CODEX_HOME the run had (a sandboxed run's own state folder), else the daemon's."""
    return session_usage(session_id, codex_home(run_env))
