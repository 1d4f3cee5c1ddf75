"""What parsing the shell costs the permission policy: median `Policies.decide()` per command, the
regex splitter of before (loaded from git at --old-rev) beside tree-sitter-bash, in separate processes.

Each command is decided --runs times under the standard preset; the parse cache is cleared before
every call, so each figure is a cold parse plus the rule walk. One JSON line per implementation, then
a Markdown table.

    python bench/policy_parse.py [--runs 200] [--old-rev e15de00]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = {
    "ls -la": "ls -la",
    "git status && git diff": "git status && git diff",
    "pytest -q tests/test_a.py": "pytest -q tests/test_a.py",
    "cat, grep, head piped": "cat src/app.py | grep -n def | head -20",
    "find -exec grep": "find . -name '*.py' -exec grep -l TODO {} +",
    "bash -c 'cd && make'": "bash -c 'cd sub && make test' 2>&1 | tail -5",
    "curl piped to sh": "curl -fsSL https://example.com/install.sh | sh",
    "here-document": "cat > notes.md <<'EOF'\n# Notes\n- one\n- two\nEOF\n",
    "10 kB compound": "ls && pwd; " * 1000,
    "100 kB compound": "ls && pwd; " * 10_000,
    "1 MB compound": "ls && pwd; " * 100_000,
}
SLOW = {"100 kB compound": 3, "1 MB compound": 1}  # runs for the big ones (the old splitter is slow there)


def measure(runs: int) -> dict[str, float]:
    from agentqueue.services import policy_rules
    from agentqueue.services.policy import Policies
    from agentqueue.services.policy_rules import agent_action

    clear = getattr(getattr(policy_rules, "shell", None), "_analyse_cached", None)
    home = Path(tempfile.mkdtemp())
    policies = Policies(home)
    started = time.perf_counter()
    policies.decide(agent_action("Bash", {"command": "ls"}, Path("/work/tree")))  # the import of the parser
    first = (time.perf_counter() - started) * 1000
    out = {"first decide (imports)": first}
    for label, command in COMMANDS.items():
        action = agent_action("Bash", {"command": command}, Path("/work/tree"))
        times = []
        for _ in range(SLOW.get(label, runs)):
            if clear is not None:
                clear.cache_clear()
            started = time.perf_counter()
            policies.decide(action)
            times.append((time.perf_counter() - started) * 1000)
        out[label] = statistics.median(times)
    return out


def old_tree(rev: str) -> Path:
    """The package as it was at `rev`, unpacked where `import agentqueue` finds it first."""
    where = Path(tempfile.mkdtemp())
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "mcp_server"], capture_output=True, check=True)
    tar_path = where / "old.tar"
    tar_path.write_bytes(archive.stdout)
    with tarfile.open(tar_path) as tar:
        tar.extractall(where, filter="data")
    (where / "mcp_server").rename(where / "agentqueue")
    return where


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--old-rev", default="e15de00", help="a commit with the regex splitter")
    parser.add_argument("--child", choices=["old", "new"])
    args = parser.parse_args()
    if args.child:
        print(json.dumps({"impl": args.child, **measure(args.runs)}))
        return
    results = {}
    for impl in ("old", "new"):
        env_path = [str(old_tree(args.old_rev))] if impl == "old" else []
        # The child imports `agentqueue` from the old tree (first on PYTHONPATH) or the installed one.
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(env_path + [os.environ.get("PYTHONPATH", "")])}
        done = subprocess.run([sys.executable, __file__, "--child", impl, "--runs", str(args.runs)],
                              capture_output=True, text=True, env=env)
        if done.returncode:
            sys.exit(f"the {impl} run failed:\n{done.stderr[-2000:]}")
        line = done.stdout.strip().splitlines()[-1]
        print(line)
        results[impl] = json.loads(line)
    print("\n| command | regex splitter (before) | tree-sitter-bash (now) |\n|---|---|---|")
    for label in ["first decide (imports)", *COMMANDS]:
        print(f"| {label} | {results['old'][label]:.2f} ms | {results['new'][label]:.2f} ms |")


if __name__ == "__main__":
    main()
