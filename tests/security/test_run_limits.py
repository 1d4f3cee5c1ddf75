"""Issue 33, M3 and M4: one run's processes and private /tmp are limited, so a fork bomb or a filled /tmp stays in
that run. Each attack is a `command` agent run by the real engine; a worker task beside it must complete while the
attack holds its ground, and the daemon (the engine in this process) keep answering."""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
import time
from pathlib import Path

import anyio
import pytest

from agentqueue.sandbox import bwrap, limits
from agentqueue.services import Services

from ..engine_runs import engine_for
from ..git_fixtures import git_env  # noqa: F401  (fixture)
from ..slowdown import scaled

pytestmark = [pytest.mark.anyio, pytest.mark.integration, pytest.mark.slow,
              pytest.mark.skipif(bwrap.probe() is not None, reason="bubblewrap missing (.ci/run installs it)")]

CEILING = 3000  # where the attacker stops by itself: on a machine without the limit, the test fails, the host lives

# Holds what the attack took until the test drops `release` in its worktree, then reports and exits 0.
HOLD = r"""
import json, os, sys, time
def hold(report):
    print("[attack] holding in " + os.getcwd(), flush=True)
    deadline = time.monotonic() + 120
    while not os.path.exists("release") and time.monotonic() < deadline:
        time.sleep(0.05)
    open("report.json", "w").write(json.dumps(report))
    print(json.dumps(report), flush=True)
"""

# First the run's processes are counted: sleepers started one by one until the kernel refuses one (EAGAIN) or
# CEILING; then, only where a limit held (never on a host without one), a real fork bomb (every process forks for
# ever) runs until the test releases it.
FORK_BOMB = HOLD + r"""
import signal, subprocess
kids = []
while len(kids) < CEILING:
    try:
        kids.append(os.posix_spawn("/bin/sleep", ["sleep", "600"], os.environ))
    except OSError:
        break
for pid in kids:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
report = {"spawned": len(kids)}
if len(kids) < CEILING:
    bomb = subprocess.Popen(["/bin/sh", "-c", 'b() { while [ ! -e /tmp/stop ]; do b & done; }; b'],
                            start_new_session=True, stderr=subprocess.DEVNULL)
    hold(report)
    open("/tmp/stop", "w").close()
    os.killpg(bomb.pid, signal.SIGKILL)
else:
    hold(report)
""".replace("CEILING", str(CEILING))

FILL_TMP = HOLD + r"""
written, error = 0, None
block = b"x" * (1 << 20)
try:
    with open("/tmp/fill", "wb") as sink:
        while written < (2 << 30):
            sink.write(block)
            written += len(block)
        sink.flush()
except OSError as caught:
    error = caught.errno
hold({"written": written, "errno": error})
"""

WORKER = "import pathlib; pathlib.Path('/tmp/w').write_text('w'); pathlib.Path('done.txt').write_text('done')"


def _log(services: Services, task_id: str) -> str:
    path = services.home / "logs" / "tasks" / f"{task_id}.log"
    return path.read_text(errors="replace") if path.exists() else ""


async def _attack_beside_a_worker(services: Services, attack: str) -> tuple[dict, str]:
    """The attack runs until it holds; a worker task then starts beside it and must complete; then it is released."""
    services.projects.create("Demo")
    repo = services.repos.add("demo", "init", name="app").checkout_path
    services.policies.edit(project_id="demo", preset="autonomous")
    services.agents.create("attacker", "command", command=shlex.join([sys.executable, "-c", attack]))
    bad = services.tasks.create("demo", "Attack", "attack", repo_id="app", max_retries=0)
    engine = engine_for(services)
    done = ("COMPLETED", "BLOCKED", "FAILED")
    async with anyio.create_task_group() as tg:
        tg.start_soon(engine.run)
        with anyio.fail_after(scaled(150)):
            while (found := re.search(r"^\[attack\] holding in (/\S+)$", _log(services, bad.id), re.M)) is None:
                assert services.tasks.get(bad.id).status not in done, services.tasks.get(bad.id).reason
                await anyio.sleep(0.1)
            # The attacker's agent is busy: the worker's task goes to the worker's agent, beside the attack.
            services.agents.create("worker", "command", command=shlex.join([sys.executable, "-c", WORKER]))
            good = services.tasks.create("demo", "Work", "work", repo_id="app")
            while services.tasks.get(good.id).status not in done:
                await anyio.sleep(0.1)  # the engine's loop (the daemon) keeps answering meanwhile
            assert services.tasks.get(good.id).status == "COMPLETED", services.tasks.get(good.id).reason
            Path(found.group(1), "release").write_text("")
            while services.tasks.get(bad.id).status not in done:
                await anyio.sleep(0.1)
        await engine.shutdown()
        tg.cancel_scope.cancel()
    log = _log(services, bad.id)
    report = json.loads(next(line for line in log.splitlines() if line.startswith("{")))
    del repo
    return report, log


async def test_a_fork_bomb_stays_in_its_run(services: Services, git_env: Path) -> None:  # noqa: F811
    started = time.monotonic()
    report, log = await _attack_beside_a_worker(services, FORK_BOMB)
    most = services.settings.sandbox.max_processes or 1024
    assert report["spawned"] < most, f"a run started {report['spawned']} processes (limit {most})"
    assert "[sandbox] limits: at most 1024 processes" in log, log[:2000]
    assert time.monotonic() - started < 150
    base = limits.pids_base()
    assert base is None or not list(base.glob(f"{os.getpid()}-*"))  # every run's cgroup removed


async def test_a_filled_tmp_fails_in_its_own_run(services: Services, git_env: Path) -> None:  # noqa: F811
    if not bwrap.sizes_tmpfs():
        pytest.skip("this bubblewrap has no --size (0.8.0 on)")
    report, log = await _attack_beside_a_worker(services, FILL_TMP)
    assert report["errno"] == 28 and report["written"] <= (1 << 30), report  # ENOSPC at the default 1 GiB
    assert "/tmp, /var/tmp and /run at most 1024 MiB each" in log
