"""Issue 33, M1: idle connections to the network gate cost the daemon a thread each, without end. Now one run has
at most MAX_CONNECTIONS open (one more gets a 503 at once, logged like other refusals), and a request head must come
within HEAD_TIMEOUT. The real engine runs a `command` agent that opens 300 connections to its proxy and sends
nothing; the daemon's threads are counted while it holds them."""

from __future__ import annotations

import json
import re
import shlex
import sys
import threading
from pathlib import Path

import anyio
import pytest

from agentqueue.sandbox import bwrap, gate
from agentqueue.services import Services

from ..engine_runs import engine_for
from ..git_fixtures import git_env  # noqa: F401  (fixture)
from ..slowdown import scaled

pytestmark = [pytest.mark.anyio, pytest.mark.integration,
              pytest.mark.skipif(bwrap.probe() is not None, reason="bubblewrap missing (.ci/run installs it)")]

OPENED = 300
ATTACK = r"""
import json, os, selectors, socket, time
socks = [socket.create_connection(("127.0.0.1", 3128), timeout=30) for _ in range(OPENED)]
print("[attack] holding in " + os.getcwd(), flush=True)
deadline = time.monotonic() + 120
while not os.path.exists("release") and time.monotonic() < deadline:
    time.sleep(0.05)
answers, pending = {}, {s.fileno(): s for s in socks}
chooser = selectors.DefaultSelector()
for s in socks:
    chooser.register(s, selectors.EVENT_READ)
deadline = time.monotonic() + 60  # the gate's head deadline (2 s here) closes what it did not refuse
while pending and time.monotonic() < deadline:
    for key, _ in chooser.select(timeout=1):
        data = key.fileobj.recv(100)
        answers[key.fileobj.fileno()] = data.split(b" ")[1].decode() if data.startswith(b"HTTP/") else "closed"
        chooser.unregister(key.fileobj)
        pending.pop(key.fileobj.fileno())
report = {"503": sum(a == "503" for a in answers.values()), "408": sum(a == "408" for a in answers.values()),
          "open": len(pending)}
print(json.dumps(report), flush=True)
""".replace("OPENED", str(OPENED))


async def test_idle_connections_are_capped_and_timed_out(services: Services, git_env: Path,  # noqa: F811
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gate, "HEAD_TIMEOUT", 2.0, raising=False)
    cap = getattr(gate, "MAX_CONNECTIONS", 128)
    services.projects.create("Demo")
    services.repos.add("demo", "init", name="app")
    services.policies.edit(project_id="demo", preset="autonomous")
    services.agents.create("attacker", "command", command=shlex.join([sys.executable, "-c", ATTACK]))
    task = services.tasks.create("demo", "Idle", "hold connections", repo_id="app", max_retries=0)
    log_path = services.home / "logs" / "tasks" / f"{task.id}.log"
    engine = engine_for(services)
    before = threading.active_count()
    async with anyio.create_task_group() as tg:
        tg.start_soon(engine.run)
        with anyio.fail_after(scaled(120)):
            while (found := re.search(r"^\[attack\] holding in (/\S+)$",
                                      log_path.read_text() if log_path.exists() else "", re.M)) is None:
                await anyio.sleep(0.1)
            held = threading.active_count() - before
            Path(found.group(1), "release").write_text("")
            while services.tasks.get(task.id).status not in ("COMPLETED", "BLOCKED", "FAILED"):
                await anyio.sleep(0.1)
        await engine.shutdown()
        tg.cancel_scope.cancel()
    assert held <= cap + 16, f"the daemon spent {held} threads on {OPENED} idle connections (cap {cap})"
    log = log_path.read_text()
    report = json.loads(next(line for line in log.splitlines() if line.startswith("{")))
    # Each was refused over the cap or timed out (a timed-out one frees its place for a later one): none hangs.
    assert report["open"] == 0 and report["503"] >= 1 and report["503"] + report["408"] == OPENED, report
    assert "connections of this run are open already" in log and "did not arrive within 2 s" in log
