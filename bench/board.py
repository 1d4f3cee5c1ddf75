"""The board's two figures, in a real headless Chromium against a real daemon:

1. first paint of a project's kanban with 1,000 tasks (target ≤ 300 ms), beside a 10-task project
   (the baseline, same page, same run);
2. the latency from an engine status change (the event's commit time in the store) to the card in
   its new column on an open page (target ≤ 1 s), while the 1,000-task kanban is open.

Medians over repeated loads; one JSON line at the end.

    python bench/board.py [--tasks 1000] [--loads 9] [--runs 12]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import httpx2 as httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.browser import CHROMIUM_ARGS, chromium_path  # noqa: E402

STUCK = ("COMPLETED", "COMPLETED", "COMPLETED", "BLOCKED", "DEFINED", "AWAITING_APPROVAL", "FAILED", "READY")
# Moves a card when it appears in the Done column: the page's own clock (epoch ms) at that moment.
WATCH = """id => new Promise(resolve => {
  const done = () => document.querySelector('#col-Done #card-' + id);
  if (done()) return resolve(performance.timeOrigin + performance.now());
  new MutationObserver((_, observer) => { if (done()) { observer.disconnect();
    resolve(performance.timeOrigin + performance.now()); } }).observe(document.getElementById('kanban'),
    {childList: true, subtree: true});
})"""


def build(home: Path, tasks: int) -> None:
    """A store with project `big` (`tasks` tasks in every column, none runnable) and `small` (10)."""
    from agentqueue.services import Services

    svc = Services(home)
    try:
        for name, count in (("Big", tasks), ("Small", 10)):
            project = svc.projects.create(name).id
            made: list[str] = []
            for n in range(count):
                deps = [made[n - 1]] if n % 7 == 3 else []
                made.append(svc.tasks.create(project, f"Task {n} of {name}", f"Work item {n}", priority=n % 50,
                                             depends_on=deps, agent_type="codex").id)
            with svc.store.transaction() as db:  # spread them over the columns (nothing here runs: no codex agent)
                for n, task_id in enumerate(made):
                    db.execute("UPDATE tasks SET status = ? WHERE id = ?", (STUCK[n % len(STUCK)], task_id))
    finally:
        svc.close()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def call(home: Path, tool: str, **arguments: Any) -> dict[str, Any]:
    from agentqueue.daemon_client import call_tool

    return call_tool(home, tool, arguments, start=False, ask=lambda _question: True)


async def first_paint(page: Any, url: str) -> dict[str, float]:
    await page.goto(url, wait_until="load")
    # A small page can finish loading before its first paint is reported: wait for the entry.
    return await page.evaluate("""() => new Promise(resolve => {
      const report = fcp => {
        const nav = performance.getEntriesByType('navigation')[0];
        resolve({server_ms: nav.responseStart - nav.requestStart, fcp_ms: fcp.startTime,
                 cards: document.querySelectorAll('.card').length,
                 links: document.querySelectorAll('#links path').length});
      };
      const seen = performance.getEntriesByName('first-contentful-paint')[0];
      if (seen) return report(seen);
      new PerformanceObserver((list, observer) => {
        const fcp = list.getEntriesByName('first-contentful-paint')[0];
        if (fcp) { observer.disconnect(); report(fcp); }
      }).observe({type: 'paint', buffered: true});
    })""")


async def measure(tasks: int, loads: int, runs: int) -> dict[str, Any]:
    from playwright.async_api import async_playwright

    with tempfile.TemporaryDirectory(prefix="agentqueue-board-") as scratch:
        home = Path(scratch) / "aq"
        started = time.monotonic()
        build(home, tasks)
        built_s = time.monotonic() - started
        port = free_port()
        env = {**os.environ, "AGENTQUEUE_HOME": str(home), "AGENTQUEUE_POLL_SECONDS": "0.1"}
        daemon = subprocess.Popen([sys.executable, "-m", "agentqueue", "serve", "--port", str(port)], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            while not (home / "daemon.json").exists():
                await anyio.sleep(0.05)
            base = f"http://127.0.0.1:{port}"
            token = (home / "token").read_text().strip()
            code = httpx.post(f"{base}/board/login-code", headers={"Authorization": f"Bearer {token}"}).json()["code"]
            agent = shlex.join([sys.executable, "-c", "print('done')"])
            os.environ["AGENTQUEUE_HOME"] = str(home)
            call(home, "create_agent", name="bench", agent_type="command", command=agent)
            async with async_playwright() as playwright:
                browser = await playwright.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
                page = await (await browser.new_context(viewport={"width": 1600, "height": 1000})).new_page()
                await page.goto(f"{base}/login?code={code}")
                await page.wait_for_url(f"{base}/")  # the login page moves on to the board by itself
                paints: dict[str, list[dict[str, float]]] = {"small": [], "big": []}
                for _ in range(loads):  # interleaved, so both see the same machine
                    for project in ("small", "big"):
                        paints[project].append(await first_paint(page, f"{base}/projects/{project}"))
                # Latency: the big kanban is open; the engine runs small tasks one by one.
                await page.goto(f"{base}/projects/big")
                await page.wait_for_function("window.agentqueueFeed && window.agentqueueFeed.readyState === 1")
                lags = []
                for n in range(runs):
                    task = call(home, "create_task", project_id="big", title=f"Live {n}", description="print")
                    seen = await page.evaluate(WATCH, task["id"])
                    event = call(home, "get_recent_events", task_id=task["id"], event_type="task.completed")
                    committed = datetime.fromisoformat(event["events"][0]["timestamp"].replace("Z", "+00:00"))
                    lags.append(seen - committed.timestamp() * 1000)
                await browser.close()
        finally:
            daemon.terminate()
            daemon.wait(timeout=30)

    def med(project: str, key: str) -> float:
        return statistics.median(p[key] for p in paints[project])

    return {"tasks": tasks, "build_s": round(built_s, 1), "loads": loads,
            "big_cards": paints["big"][0]["cards"], "big_links": paints["big"][0]["links"],
            "fcp_ms_big": round(med("big", "fcp_ms"), 1), "fcp_ms_small": round(med("small", "fcp_ms"), 1),
            "fcp_ratio": round(med("big", "fcp_ms") / med("small", "fcp_ms"), 2),
            "server_ms_big": round(med("big", "server_ms"), 1), "server_ms_small": round(med("small", "server_ms"), 1),
            "status_to_card_ms_p50": round(statistics.median(lags), 1),
            "status_to_card_ms_max": round(max(lags), 1), "runs": runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--loads", type=int, default=9)
    parser.add_argument("--runs", type=int, default=12)
    args = parser.parse_args()
    result = anyio.run(measure, args.tasks, args.loads, args.runs)
    print(f"kanban of {result['tasks']} tasks ({result['big_cards']} cards, {result['big_links']} links): "
          f"first paint {result['fcp_ms_big']} ms (10 tasks: {result['fcp_ms_small']} ms, ratio {result['fcp_ratio']}); "
          f"server {result['server_ms_big']} ms (10 tasks: {result['server_ms_small']} ms)")
    print(f"engine status change -> card moved: p50 {result['status_to_card_ms_p50']} ms, "
          f"max {result['status_to_card_ms_max']} ms over {result['runs']} runs")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
