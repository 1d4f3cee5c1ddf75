"""What the OS sandbox adds to a run's start: a process started bare, beside the same process started the way
the engine starts it (rules, network gate, bubblewrap, the inner relay when the network is an allowlist).

Each sample times spawn → the child's first byte on stdout (the child prints and exits), interleaved so
both sides see the same machine load. Goal (issue 18): the sandbox adds <= 50 ms to a run's start (median).

    python bench/sandbox_start.py [--runs 40]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from agentqueue import settings  # noqa: E402
from agentqueue.sandbox.runs import Sandbox  # noqa: E402

CHILD = ["/bin/sh", "-c", "echo started"]


def first_byte(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    start = time.perf_counter()
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env, cwd=cwd)
    assert process.stdout is not None
    process.stdout.read(1)
    elapsed = time.perf_counter() - start
    process.wait()
    return elapsed


def sandboxed(sandbox: Sandbox, network: str, work: Path) -> float:
    """Rules, gate, argv and the first byte: everything the engine adds per run."""
    start = time.perf_counter()
    rules = sandbox.rules_for(work, None, preset="standard", agent_type="claude-code", env=dict(os.environ))
    rules = type(rules)(**{**rules.__dict__, "network": network})
    with sandbox.contained(CHILD, dict(os.environ), rules, lambda *_: None) as (argv, env):
        first_byte(argv, env, work)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=40)
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory() as tmp:
        home, work = Path(tmp, "home"), Path(tmp, "work")
        home.mkdir()
        work.mkdir()
        sandbox = Sandbox(home, settings.load(home), lambda _project: False)
        times: dict[str, list[float]] = {"bare": [], "sandbox, network off": [], "sandbox, allowlist": []}
        for _ in range(runs):
            times["bare"].append(first_byte(CHILD, dict(os.environ), work))
            times["sandbox, network off"].append(sandboxed(sandbox, "off", work))
            times["sandbox, allowlist"].append(sandboxed(sandbox, "allowlist", work))
    bare = statistics.median(times["bare"])
    print(f"{'start':<22} {'median ms':>10} {'p90 ms':>8} {'added ms':>9}")
    for name, samples in times.items():
        median = statistics.median(samples)
        p90 = sorted(samples)[int(len(samples) * 0.9) - 1]
        print(f"{name:<22} {median * 1000:>10.1f} {p90 * 1000:>8.1f} {(median - bare) * 1000:>9.1f}")


if __name__ == "__main__":
    main()
