"""Load: N plugin clients × D seconds of mixed reads and writes while the engine runs `command` tasks.

Real processes: one `agentqueue serve` daemon and N `agentqueue mcp` plugins driven by the official MCP
client. Every acknowledged write is checked afterwards (no lost update) and every error is counted
(lock errors by name). Prints calls/s and p50/p99 per kind of call, and one JSON line.

    python bench/load.py [--clients 8] [--seconds 60]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters
from mcp.types import ElicitResult

WRITES = ("create_task", "append_note")
READS = ("list_tasks", "get_status", "get_task", "read_note")


async def _yes(context: Any, params: Any) -> ElicitResult:
    return ElicitResult(action="accept", content={"approve": True})


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def _arguments(kind: str, index: int, n: int, last_task: str | None) -> dict[str, Any] | None:
    """Client `index`'s n-th call of tool `kind`; None for a get_task before the client created one."""
    args: dict[str, Any] = {"project_id": "load"}
    if kind == "create_task":
        args |= {"title": f"c{index} #{n}", "description": "load test task"}
    elif kind == "append_note":
        args |= {"title": "Log", "content": f"line c{index}-{n}"}
    elif kind == "get_task":
        if last_task is None:
            return None
        args = {"task_id": last_task}
    elif kind == "read_note":
        args |= {"title": "Log"}
    return args


async def run(clients: int = 8, seconds: float = 60.0, home: Path | None = None) -> dict[str, Any]:
    """Drive the load; returns the figures and what went wrong (errors, lost writes)."""
    own = tempfile.TemporaryDirectory(prefix="agentqueue-load-") if home is None else None
    root = Path(own.name) if own else home
    env = {**os.environ, "AGENTQUEUE_HOME": str(root / "aq"), "AGENTQUEUE_POLL_SECONDS": "0.2"}
    server = subprocess.Popen([sys.executable, "-m", "agentqueue", "serve", "--no-http"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    params = StdioServerParameters(command=sys.executable, args=["-m", "agentqueue", "mcp"], env=env)
    latencies: dict[str, list[float]] = {name: [] for name in (*WRITES, *READS)}
    errors: list[str] = []
    created: list[str] = []
    appended: list[str] = []
    try:
        deadline = time.monotonic() + 30
        while not (root / "aq" / "daemon.json").exists():
            if time.monotonic() > deadline or server.poll() is not None:
                raise RuntimeError("the daemon did not start")
            await anyio.sleep(0.05)
        async with Client(params, elicitation_callback=_yes) as setup:
            await setup.call_tool("create_project", {"name": "Load", "max_concurrent_agents": 4})
            for n in range(2):
                await setup.call_tool("create_agent", {"name": f"worker {n}", "agent_type": "command",
                                                       "command": "true"})
        stop_at = time.monotonic() + seconds

        async def one(index: int) -> None:
            async with Client(params, elicitation_callback=_yes) as client:
                n = 0
                last_task: str | None = None
                while time.monotonic() < stop_at:
                    n += 1
                    kind = (*WRITES, *READS)[n % 6]
                    args = _arguments(kind, index, n, last_task)
                    if args is None:
                        continue
                    started = time.perf_counter()
                    result = await client.call_tool(kind, args)
                    latencies[kind].append((time.perf_counter() - started) * 1000)
                    if result.is_error:
                        text = result.content[0].text if result.content else "(no text)"
                        if not (kind == "read_note" and "No note" in text):  # before the first append
                            errors.append(f"{kind}: {text[:200]}")
                        continue
                    if kind == "create_task":
                        last_task = result.structured_content["id"]
                        created.append(last_task)
                    elif kind == "append_note":
                        appended.append(args["content"])

        async with anyio.create_task_group() as tg:
            for index in range(clients):
                tg.start_soon(one, index)
        async with Client(params) as check:
            note = (await check.call_tool("read_note", {"project_id": "load", "title": "Log"})).structured_content
            listed = await check.call_tool("list_tasks", {"project_id": "load", "limit": 1,
                                                          "include_completed": True})
            status = (await check.call_tool("get_status", {})).structured_content
        lost_appends = [line for line in appended if line not in note["content"].splitlines()]
        total_tasks = listed.structured_content.get("total", 0)
    finally:
        subprocess.run([sys.executable, "-m", "agentqueue", "stop", "--force"], env=env, capture_output=True,
                       timeout=60)
        if server.poll() is None:
            server.kill()
        if own:
            own.cleanup()
    calls = sum(len(v) for v in latencies.values())
    return {
        "clients": clients, "seconds": seconds, "calls": calls, "calls_per_s": round(calls / seconds, 1),
        "p50_ms": {k: round(statistics.median(v), 1) for k, v in latencies.items() if v},
        "p99_ms": {k: round(_pct(v, 0.99), 1) for k, v in latencies.items() if v},
        "errors": errors, "lock_errors": [e for e in errors if "locked" in e.lower()],
        "acknowledged_appends": len(appended), "lost_appends": lost_appends,
        "tasks_created": len(created), "tasks_in_store": total_tasks,
        "completed_meanwhile": (status.get("tasks") or {}).get("by_status", {}).get("COMPLETED", 0),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args()
    figures = anyio.run(run, args.clients, args.seconds)
    print(f"{figures['clients']} clients × {figures['seconds']:.0f} s: {figures['calls']} calls, "
          f"{figures['calls_per_s']} calls/s; errors {len(figures['errors'])} (lock {len(figures['lock_errors'])}); "
          f"appends acknowledged {figures['acknowledged_appends']}, lost {len(figures['lost_appends'])}; tasks "
          f"created {figures['tasks_created']}, in the store {figures['tasks_in_store']}")
    print("| call | p50 ms | p99 ms |\n|---|---:|---:|")
    for kind, p50 in figures["p50_ms"].items():
        print(f"| {kind} | {p50} | {figures['p99_ms'][kind]} |")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
