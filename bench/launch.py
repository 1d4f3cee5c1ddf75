"""Launch benchmark: spawn -> `initialize` answered, side by side, interleaved, medians and ratios.

(a) `agentqueue mcp` with a warm daemon  (b) a minimal one-tool MCPServer (the SDK floor)
(c) `agentqueue mcp --standalone`.  Target (issue 2): median(a) <= 0.15 x median(b).

    python bench/launch.py [--runs 9]      # prints a table and one JSON line; never fails on timing
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

HERE = Path(__file__).resolve().parent
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}}


def time_initialize(argv: list[str], env: dict[str, str]) -> float:
    """Milliseconds from spawn to the initialize response, over raw pipes (no client SDK)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    proc.stdin.write((json.dumps(INIT) + "\n").encode())
    proc.stdin.flush()
    while True:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{argv} closed stdout before answering")
        if json.loads(line).get("id") == 1:
            break
    elapsed = (time.perf_counter() - start) * 1000
    proc.stdin.close()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="aq-bench-"))
    env = {**os.environ, "AGENTQUEUE_HOME": str(home), "AGENTQUEUE_PORT": "0"}
    py = sys.executable
    cases = {
        "a_plugin_warm_daemon": [py, "-m", "agentqueue", "mcp"],
        "b_sdk_minimal_server": [py, str(HERE / "minimal_server.py")],
        "c_standalone": [py, "-m", "agentqueue", "mcp", "--standalone"],
    }
    cold_daemon_ms = time_initialize(cases["a_plugin_warm_daemon"], env)  # starts the daemon
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.runs):  # interleaved so machine noise hits every case alike
        for name, argv in cases.items():
            samples[name].append(time_initialize(argv, env))
    subprocess.run([py, "-m", "agentqueue", "stop"], env=env, capture_output=True)
    medians = {name: statistics.median(values) for name, values in samples.items()}
    ratio = medians["a_plugin_warm_daemon"] / medians["b_sdk_minimal_server"]
    print(f"{'case':<24}{'median ms':>10}{'min':>8}{'max':>8}")
    for name, values in samples.items():
        print(f"{name:<24}{medians[name]:>10.1f}{min(values):>8.1f}{max(values):>8.1f}")
    print(f"first plugin launch (starts the daemon): {cold_daemon_ms:.0f} ms")
    print(f"ratio a/b = {ratio:.3f} (target <= 0.15); c/b = {medians['c_standalone'] / medians['b_sdk_minimal_server']:.2f}")
    print(json.dumps({"runs": args.runs, "medians_ms": {k: round(v, 1) for k, v in medians.items()},
                      "cold_daemon_start_ms": round(cold_daemon_ms, 1), "ratio_a_over_b": round(ratio, 3)}))


if __name__ == "__main__":
    main()
