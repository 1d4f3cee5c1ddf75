"""H4 (issue 33): run output the daemon reads. The `codex` ACP preset's tokens come from the session's rollout file,
in a folder the run writes; a hostile agent plants a FIFO there (whose plain open blocks until a writer comes) or a
link to /dev/zero (which never ends). The engine's event loop must stay responsive and the run must still end."""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from pathlib import Path

import anyio
import pytest

from agentqueue.sandbox import bwrap
from agentqueue.services import Services

from .. import acp_script_agent as script
from ..engine_runs import engine_for
from ..git_fixtures import git_env  # noqa: F401  (fixture)
from ..slowdown import scaled

pytestmark = [pytest.mark.anyio, pytest.mark.integration,
              pytest.mark.skipif(bwrap.probe() is not None, reason="bubblewrap missing (.ci/run installs it)")]

FROZEN_AFTER = 8.0  # seconds without a heartbeat on the loop: far beyond any honest pause on a busy machine
PLANTS = {"fifo": 'mkfifo "$f"', "dev-zero": 'ln -s /dev/zero "$f"'}


def fake_codex_acp(folder: Path, plant: str) -> Path:
    """The codex-acp the preset runs: it plants its trap where Codex keeps the session's rollout, then is an ACP
    agent (tests/acp_script_agent.py, whose session id is script-session)."""
    folder.mkdir(parents=True, exist_ok=True)
    adapter = folder / "codex-acp"
    adapter.write_text(f"""#!/bin/sh
d="${{CODEX_HOME:-$HOME/.codex}}/sessions/2026/01/01"
mkdir -p "$d"
f="$d/rollout-2026-01-01T00-00-00-script-session.jsonl"
{PLANTS[plant]}
exec {sys.executable} {folder / 'acp_script_agent.py'}
""")
    adapter.chmod(0o755)
    # Beside the adapter, whose folder the sandbox shows as the command's own: a checkout under /tmp is hidden.
    shutil.copyfile(script.__file__, folder / "acp_script_agent.py")
    return adapter


class LoopGuard:
    """Watches the event loop's heartbeat from a thread; a loop that stops beating is frozen, and its FIFO is then
    opened for writing so that the blocked open returns and the test can fail instead of hanging."""

    def __init__(self, fifo_folders: list[Path]) -> None:
        self.beat = time.monotonic()
        self.frozen = 0.0
        self.folders = fifo_folders
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    async def heartbeat(self) -> None:
        while True:
            self.beat = time.monotonic()
            await anyio.sleep(0.05)

    def _watch(self) -> None:
        while not self.done.wait(0.2):
            stale = time.monotonic() - self.beat
            if stale > FROZEN_AFTER:
                self.frozen = max(self.frozen, stale)
                for rollout in (p for folder in self.folders for p in folder.glob("sessions/*/*/*/rollout-*")):
                    try:
                        os.close(os.open(rollout, os.O_WRONLY | os.O_NONBLOCK))  # the reader's open returns, at EOF
                    except OSError:
                        pass


@pytest.mark.parametrize("plant", sorted(PLANTS))
async def test_a_planted_rollout_freezes_nothing_and_the_run_ends(services: Services, tmp_path: Path, plant: str,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  git_env: Path) -> None:  # noqa: F811
    monkeypatch.setenv("AGENTQUEUE_CODEX_ACP_BIN", str(fake_codex_acp(tmp_path / "bin", plant)))
    monkeypatch.delenv("CODEX_HOME", raising=False)
    services.projects.create("Demo")
    services.repos.add("demo", "init", name="app")
    services.agents.create("codex", "acp", command="codex")
    task = services.tasks.create("demo", "Trap", "say hello", repo_id="app", max_retries=0)
    guard = LoopGuard([git_env / ".codex"])
    engine = engine_for(services)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(guard.heartbeat)
            tg.start_soon(engine.run)
            with anyio.fail_after(scaled(90)):
                while services.tasks.get(task.id).status not in ("COMPLETED", "FAILED", "BLOCKED"):
                    await anyio.sleep(0.1)
            await engine.shutdown()
            tg.cancel_scope.cancel()
    finally:
        guard.done.set()
    assert not guard.frozen, f"the engine's event loop stood still for {guard.frozen:.0f} s on the planted rollout"
    assert services.tasks.get(task.id).status == "COMPLETED", services.tasks.get(task.id).reason
