"""Launch benchmark: what a client waits for when it starts AgentQueue, and what the plugin costs in memory.

Each case is spawned over raw pipes (no client SDK in the measured process) and driven as a client
drives it: `initialize` (2025-11-25), `notifications/initialized`, `tools/list`. The cases run
interleaved so machine noise hits all alike; medians and ratios are reported.

(a) `agentqueue mcp` with a warm daemon (the script beside this interpreter, as `agentqueue install`
    configures clients)  (b) a one-tool MCPServer from the same SDK (`bench/minimal_server.py`, the
    anchor)  (c) `agentqueue mcp --standalone` (shown, no goal).

Rows (issue 19): spawn -> initialize + tools/list answered, a / b <= 0.05; and the plugin's peak RSS
over a real session (initialize, tools/list, a `get_status` call; VmHWM just before it exits)
<= 14 MiB, beside a bare interpreter measured the same way. Also the older issue-2 row, spawn ->
initialize, a / b <= 0.15.

Measure a regular (non-editable) install in a fresh venv: an editable install's import finder adds
~23 ms to every Python start.

    python -m venv /tmp/v && /tmp/v/bin/pip install . && /tmp/v/bin/python bench/launch.py [--runs 9]
    ... bench/launch.py --quick --json out.json   # under a minute; the JSON rows for docs/benchmarks.md

It never exits non-zero on a timing.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PROTOCOL = "2025-11-25"
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
TOOLS_LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
MIB = 1024 * 1024


@dataclass
class Session:
    initialize_ms: float  # spawn -> initialize answered
    listed_ms: float  # spawn -> tools/list answered
    tools: int
    peak_rss_mib: float  # VmHWM once the session's last answer is in


def _send(proc: subprocess.Popen[bytes], message: dict[str, Any]) -> None:
    assert proc.stdin is not None
    proc.stdin.write((json.dumps(message) + "\n").encode())
    proc.stdin.flush()


def _answer(proc: subprocess.Popen[bytes], message_id: int) -> dict[str, Any]:
    assert proc.stdout is not None
    while True:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{proc.args} closed stdout before answering request {message_id}")
        message = json.loads(line)
        if message.get("id") == message_id:
            if "error" in message:
                raise RuntimeError(f"{proc.args} answered request {message_id} with {message['error']}")
            return message["result"]


def peak_rss_mib(pid: int) -> float:
    """The process's peak resident set so far (VmHWM). Not `ru_maxrss` of the reaped child: Linux carries
    the forking parent's high-water mark across exec into it, so a child would never look smaller than us."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    raise RuntimeError(f"no VmHWM for pid {pid}")


def _leave(proc: subprocess.Popen[bytes]) -> None:
    """Close stdin (the client leaves) and wait for the exit."""
    assert proc.stdin is not None
    proc.stdin.close()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def session(argv: list[str], env: dict[str, str], call: str | None = None) -> Session:
    """One client session: spawn, initialize, tools/list (timed), then optionally one tool call, then leave."""
    start = time.perf_counter()
    # Read in 64 KiB chunks, as clients do (Node reads pipes so), not 8 KiB: a 98 KB tool list is one line.
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                            bufsize=65536)
    try:
        _send(proc, INITIALIZE)
        _answer(proc, 1)
        initialized = time.perf_counter()
        _send(proc, INITIALIZED)
        _send(proc, TOOLS_LIST)
        tools = len(_answer(proc, 2)["tools"])
        listed = time.perf_counter()
        if call is not None:
            _send(proc, {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": call, "arguments": {}}})
            _answer(proc, 3)
        rss = peak_rss_mib(proc.pid)  # the session is done; what follows is the exit
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    _leave(proc)
    return Session((initialized - start) * 1000, (listed - start) * 1000, tools, rss)


def bare_peak_rss(py: str) -> float:
    """A bare interpreter's peak RSS, read the same way (it waits on stdin, importing nothing): the memory anchor."""
    proc = subprocess.Popen([py, "-c", "import sys; sys.stdin.buffer.read()"], stdin=subprocess.PIPE)
    time.sleep(0.2)  # let it finish starting
    rss = peak_rss_mib(proc.pid)
    _leave(proc)
    return rss


def plugin_argv(py: str) -> list[str]:
    """What `agentqueue install` puts in a client's config: the script beside the interpreter, else `-P -m`."""
    script = Path(py).parent / "agentqueue"
    return [str(script)] if script.exists() else [py, "-P", "-m", "agentqueue"]


def editable_install() -> bool:
    """Whether `agentqueue` is this checkout itself (pip install -e): its import finder runs at every Python start."""
    spec = importlib.util.find_spec("agentqueue")
    origin = Path(spec.origin).resolve() if spec and spec.origin else None
    return origin is not None and HERE.parent in origin.parents


def row(metric: str, value: float, unit: str, anchor: str | None, anchor_value: float | None, goal: str,
        met: bool, **extra: Any) -> dict[str, Any]:
    ratio = round(value / anchor_value, 4) if anchor_value else None
    return {"metric": metric, "value": round(value, 2), "unit": unit, "anchor": anchor,
            "anchor_value": round(anchor_value, 2) if anchor_value is not None else None, "ratio": ratio,
            "goal": goal, "met": met, **extra}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=9, help="interleaved rounds (default 9)")
    parser.add_argument("--quick", action="store_true", help="5 rounds, no standalone case (under a minute)")
    parser.add_argument("--json", metavar="PATH", help="write the rows here as a JSON list")
    args = parser.parse_args()
    runs = 5 if args.quick else args.runs
    install = "editable" if editable_install() else "regular"
    if install == "editable":
        print("warning: agentqueue is an editable install here; its import finder runs at every Python start "
              "(~23 ms when measured for issue 8). Measure from a regular install in a fresh venv (see this "
              "script's docstring).",
              file=sys.stderr)
    home = Path(tempfile.mkdtemp(prefix="aq-bench-"))
    env = {**os.environ, "AGENTQUEUE_HOME": str(home), "AGENTQUEUE_PORT": "0"}
    py = sys.executable
    plugin = [*plugin_argv(py), "mcp"]
    cases = {"a_plugin_warm_daemon": plugin, "b_sdk_one_tool_server": [py, str(HERE / "minimal_server.py")]}
    if not args.quick:
        cases["c_standalone"] = [*plugin, "--standalone"]
    try:
        cold = session(plugin, env)  # the first launch on a home starts the daemon
        samples: dict[str, list[Session]] = {name: [] for name in cases}
        rss: list[float] = []
        bare: list[float] = []
        for _ in range(runs):  # interleaved so machine noise hits every case alike
            for name, argv in cases.items():
                samples[name].append(session(argv, env))
            rss.append(session(plugin, env, call="get_status").peak_rss_mib)
            bare.append(bare_peak_rss(py))
    finally:
        subprocess.run([*plugin_argv(py), "stop", "--force"], env=env, capture_output=True, timeout=60)
        shutil.rmtree(home, ignore_errors=True)

    def median(name: str, field: str) -> float:
        return statistics.median(getattr(s, field) for s in samples[name])

    a_list, b_list = median("a_plugin_warm_daemon", "listed_ms"), median("b_sdk_one_tool_server", "listed_ms")
    a_init, b_init = median("a_plugin_warm_daemon", "initialize_ms"), median("b_sdk_one_tool_server", "initialize_ms")
    peak, bare_peak = statistics.median(rss), statistics.median(bare)
    anchor = "one-tool MCPServer from the same SDK (bench/minimal_server.py), same run"
    rows = [
        row("client launch, warm daemon (spawn -> initialize + tools/list)", a_list, "ms", anchor, b_list,
            "<= 0.05 x anchor", a_list <= 0.05 * b_list, runs=runs, install=install, before="0.07–0.10 ×",
            tools=samples["a_plugin_warm_daemon"][0].tools, first_launch_starts_daemon_ms=round(cold.listed_ms, 1),
            **({"standalone_ms": round(median("c_standalone", "listed_ms"), 1)} if "c_standalone" in samples else {})),
        row("client launch, warm daemon (spawn -> initialize)", a_init, "ms", anchor, b_init,
            "<= 0.15 x anchor (issue 2)", a_init <= 0.15 * b_init, runs=runs, install=install),
        row("plugin peak RSS (initialize, tools/list, get_status)", peak, "MiB",
            "bare interpreter (python -c, reading stdin), same run",
            bare_peak, "<= 14 MiB", peak <= 14, runs=runs, before="17.9 MiB"),
    ]
    print(f"{'case':<24}{'init ms':>9}{'+list ms':>10}{'min':>8}{'max':>8}  (medians of {runs}, interleaved)")
    for name, values in samples.items():
        listed = [s.listed_ms for s in values]
        print(f"{name:<24}{median(name, 'initialize_ms'):>9.1f}{median(name, 'listed_ms'):>10.1f}"
              f"{min(listed):>8.1f}{max(listed):>8.1f}")
    print(f"first plugin launch (starts the daemon): {cold.listed_ms:.0f} ms to the tool list")
    if "c_standalone" in samples:
        print(f"standalone / anchor (initialize + tools/list) = {median('c_standalone', 'listed_ms') / b_list:.2f}")
    print(f"plugin peak RSS {peak:.1f} MiB (min {min(rss):.1f}, max {max(rss):.1f}); "
          f"bare interpreter {bare_peak:.1f} MiB")
    print()
    print(f"{'metric':<62}{'value':>9} {'unit':<4}{'anchor':>9}{'ratio':>8}  goal")
    for r in rows:
        ratio = f"{r['ratio']:.3f}" if r["ratio"] is not None else "-"
        print(f"{r['metric']:<62}{r['value']:>9.1f} {r['unit']:<4}{r['anchor_value']:>9.1f}{ratio:>8}  "
              f"{r['goal']} {'met' if r['met'] else 'MISSED'}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
