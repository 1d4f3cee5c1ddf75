"""Issue 33, M5: a run's log is capped. A `command` agent run by the real engine prints 1 GiB; its log keeps the
head and the last part, says where it was cut and how much, a task beside it completes, and the daemon (this
process) does not grow with the output."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

from agentqueue.sandbox import bwrap
from agentqueue.services import Services

from ..engine_runs import engine_for, run_until
from ..git_fixtures import git_env  # noqa: F401  (fixture)
from .memory import MiB, rss_peak

pytestmark = [pytest.mark.anyio, pytest.mark.integration, pytest.mark.slow,
              pytest.mark.skipif(bwrap.probe() is not None, reason="bubblewrap missing (.ci/run installs it)")]

FLOOD = r"""
import sys
line = b"y" * (1 << 20) + b"\n"
for _ in range(1024):
    sys.stdout.buffer.write(line)
print("LAST-LINE-OF-THE-FLOOD", flush=True)
"""


async def test_a_flooding_run_gets_a_capped_log(services: Services, git_env: Path) -> None:  # noqa: F811
    services.projects.create("Demo")
    services.repos.add("demo", "init", name="app")
    services.policies.edit(project_id="demo", preset="autonomous")
    services.agents.create("flooder", "command", command=shlex.join([sys.executable, "-c", FLOOD]))
    services.agents.create("worker", "command", command=shlex.join([sys.executable, "-c", "print('worked')"]))
    flood = services.tasks.create("demo", "Flood", "print", repo_id="app", max_retries=0)
    work = services.tasks.create("demo", "Work", "work", repo_id="app", max_retries=0)
    ended = ("COMPLETED", "BLOCKED", "FAILED")
    with rss_peak() as peak:
        await run_until(engine_for(services), lambda: all(services.tasks.get(t.id).status in ended
                                                          for t in (flood, work)), timeout=240)
    assert services.tasks.get(work.id).status == "COMPLETED", services.tasks.get(work.id).reason
    assert services.tasks.get(flood.id).status == "COMPLETED", services.tasks.get(flood.id).reason
    log_path = services.home / "logs" / "tasks" / f"{flood.id}.log"
    size = log_path.stat().st_size
    assert size < 16 * MiB, f"a 1 GiB output made a {size / MiB:.0f} MiB log"
    log = log_path.read_text()
    assert "[runner] the log passed 8 MiB" in log and "lines) of output were cut here" in log
    assert "LAST-LINE-OF-THE-FLOOD" in log and "[done] completed" in log
    assert peak.grew < 64 * MiB, f"the daemon grew {peak.grew / MiB:.0f} MiB"
