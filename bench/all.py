"""Every row of issue 19's table, and issue 21's landing figures, measured in one run and written into
docs/benchmarks.md.

Runs each benchmark with `--json`, collects its rows (value, the anchor measured beside it in the
same run, the ratio, the goal) and rewrites the part of docs/benchmarks.md between the two markers
below; the rest of the file (earlier issues' figures) is left as it is. Timings never fail the run.

    python bench/all.py            # full sizes (100k-task stores: about half an hour on 2 cores)
    python bench/all.py --quick    # each benchmark's --quick form, for a look in a few minutes
    python bench/all.py --only launch,board --print   # some benchmarks; print, do not write the docs
    python bench/all.py --only engine   # measure one again: its rows replace theirs, the others are kept
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import datetime, UTC
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
BEGIN = "<!-- bench/all.py: begin (generated; edit bench/all.py, not this part) -->"
END = "<!-- bench/all.py: end -->"
ROUNDS = "Rounds: "  # the start of a line under the table that gives every round of a row measured in rounds

# name -> (script, extra arguments for a full run); each script also takes --quick and --json PATH.
BENCHES: dict[str, tuple[str, list[str]]] = {
    "engine": ("engine_throughput.py", []),
    "store": ("scale.py", ["--sizes", "1000,100000"]),
    "toolsets": ("toolsets.py", []),
    "launch": ("launch.py", []),
    "cli": ("cli_reads.py", []),
    "board": ("board.py", []),
    "queue": ("merge_queue.py", []),  # issue 21: landing through the merge queue, one by one and batched
}

# The "now" column, measured the week it was filed (2-core machine), by the start of the row's metric.
BEFORE: dict[str, str] = {
    "engine overhead per task": "774 ms (10.9 × a floor of 74 ms)",
    "engine throughput": "4.7 tasks/s",
    "git commands per task": "32 (floor 7)",
    "get_status @100,000 tasks (sqlite)": "35–60 ms",
    "list_tasks @100,000 tasks (sqlite)": "11–20 ms",
    "create_task @100,000 tasks (sqlite)": "33 ms (get_task 4 ms)",
    "tool list by default: tokens per tool (mean)": "110 tokens",
    "tool list by default: tokens per tool (max)": "348 (create_hook)",
    "every tool: tokens per tool (mean)": "110 tokens (73 tools)",
    "agentqueue ": "0.4 s with no data; 2.7–7 s under load with data",
    "board: kanban of 1,000 tasks, server time": "79 ms",
    "board: small response on a kept-alive connection": "+41 ms a response (Nagle)",
}


def before_of(row: dict[str, Any]) -> Any:
    """The row's own before figure, else the issue's."""
    if row.get("before") is not None:
        return row["before"]
    return next((text for start, text in BEFORE.items() if row["metric"].startswith(start)), None)


def run(name: str, quick: bool) -> tuple[list[dict[str, Any]], float, str]:
    """The rows one benchmark wrote, its wall time, and its output's tail when it wrote none."""
    script, extra = BENCHES[name]
    with tempfile.TemporaryDirectory(prefix="aq-bench-all-") as tmp:
        out = Path(tmp) / "rows.json"
        argv = [sys.executable, str(ROOT / "bench" / script), "--json", str(out), *(["--quick"] if quick else extra)]
        start = time.perf_counter()
        proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
        elapsed = time.perf_counter() - start
        rows = json.loads(out.read_text()) if out.exists() else []
    tail = "" if rows else (proc.stdout + proc.stderr)[-2000:]
    return rows, elapsed, tail


def number(value: Any, unit: str) -> str:
    if value is None:
        return "—"
    if isinstance(value, float) and not value.is_integer():
        text = f"{value:,.1f}" if abs(value) >= 10 else f"{value:,.2f}"
    else:
        text = f"{int(value):,}"
    return f"{text} {unit}".strip()


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| metric | anchor, same run | goal | before (issue 19) | now | ratio to anchor | met |",
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        unit = row.get("unit", "")
        anchor = row.get("anchor")
        anchor_text = f"{anchor}: {number(row.get('anchor_value'), unit)}" if anchor else "—"
        ratio = row.get("ratio")
        before = before_of(row)
        before_text = number(before, unit) if isinstance(before, (int, float)) else before or "—"
        lines.append("| " + " | ".join([
            row["metric"], anchor_text, row.get("goal", "—"), before_text,
            number(row["value"], unit), f"{ratio:.3f} ×" if isinstance(ratio, (int, float)) else "—",
            "yes" if row.get("met") else "**no**",
        ]) + " |")
    return "\n".join(lines)


def section(results: dict[str, tuple[list[dict[str, Any]], float, str]], quick: bool) -> str:
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    # A group's size and the like are context in the benchmark's own output, not rows of the table.
    rows = [row for name in BENCHES if name in results for row in results[name][0]
            if not str(row.get("goal", "")).startswith("(")]
    failed = [name for name, (got, _, _) in results.items() if not got]
    parts = [BEGIN, "",
             f"`python bench/all.py{' --quick' if quick else ''}` on {platform.node() or 'this machine'} "
             f"({os.cpu_count()} CPUs), {when}. Each ratio is against the anchor measured in the same run.", "",
             table(rows), ""]
    for row in rows:  # a row measured in rounds (bench/engine_throughput.py): every round's ratio, not only the median
        if row.get("round_ratios"):
            ratios = ", ".join(f"{r:.2f} ×" for r in row["round_ratios"])
            parts += [f"{ROUNDS}{row['metric']}: the median of {len(row['round_ratios'])} rounds, each the floor, the "
                      f"engine and the floor again; the rounds' ratios, in order: {ratios}.", ""]
    parts.append("Per benchmark (wall time): " + ", ".join(
        f"`bench/{BENCHES[name][0]}` {results[name][1]:.0f} s" for name in BENCHES if name in results) + ".")
    if failed:
        parts += ["", "Wrote no rows: " + ", ".join(f"`{name}`" for name in failed) + " (see its output)."]
    parts += ["", END]
    return "\n".join(parts)


def write_doc(text: str) -> None:
    doc = DOC.read_text()
    if BEGIN in doc and END in doc:
        head, rest = doc.split(BEGIN, 1)
        doc = head + text + rest.split(END, 1)[1]
    else:
        doc = doc.rstrip("\n") + "\n\n## Fast at every layer (issue 19)\n\n" + text + "\n"
    DOC.write_text(doc)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="each benchmark's quick form")
    parser.add_argument("--only", help="comma-separated: " + ",".join(BENCHES))
    parser.add_argument("--print", action="store_true", help="print the section; do not write docs/benchmarks.md")
    args = parser.parse_args()
    names = [n.strip() for n in args.only.split(",")] if args.only else list(BENCHES)
    unknown = [n for n in names if n not in BENCHES]
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(BENCHES)}")
    results = {}
    for name in names:  # one at a time: two benchmarks side by side would measure each other
        print(f"bench/all.py: {BENCHES[name][0]} …", file=sys.stderr, flush=True)
        results[name] = run(name, args.quick)
        rows, elapsed, tail = results[name]
        print(f"  {len(rows)} row(s) in {elapsed:.0f} s" + (f"\n{tail}" if tail else ""), file=sys.stderr)
    text = section(results, args.quick)
    if args.only and not args.print:
        text = merged(text, results)
    print(text)
    if not args.print:
        write_doc(text)


def merged(text: str, results: dict[str, tuple[list[dict[str, Any]], float, str]]) -> str:
    """`--only`: the section as it was, with the rows of the benchmarks just run put in place (by metric) and a line
    saying which were measured again and when; the other rows keep the figures of their own run."""
    doc = DOC.read_text()
    if BEGIN not in doc or END not in doc:
        return text
    old = doc.split(BEGIN, 1)[1].split(END, 1)[0].splitlines()
    new = {line.split(" | ", 1)[0]: line for line in text.splitlines() if line.startswith("| ") and "---" not in line}
    lines = [new.pop(line.split(" | ", 1)[0], line) if line.startswith("| ") else line for line in old]
    last = max((i for i, line in enumerate(lines) if line.startswith("| ")), default=len(lines) - 1)
    lines[last + 1:last + 1] = list(new.values())  # metrics the earlier run did not have
    notes = [line for line in text.splitlines() if line.startswith(ROUNDS)]
    if notes:  # the rounds of the rows just measured, in place of their earlier rounds
        lines = [line for line in lines if not line.startswith(ROUNDS)]
        last = max((i for i, line in enumerate(lines) if line.startswith("| ")), default=len(lines) - 1)
        lines[last + 1:last + 1] = ["", *(part for note in notes for part in (note, ""))][:-1]
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    again = ", ".join(f"`bench/{BENCHES[name][0]}`" for name in results)
    lines = [line for line in lines if not line.startswith("Measured again with `--only`")]
    lines.insert(len(lines) - 1 if lines and not lines[-1].strip() else len(lines),
                 f"Measured again with `--only` at {when}: the rows of {again}.")
    return BEGIN + "\n".join(lines) + "\n" + END  # the end marker on a line of its own, as a full run leaves it


if __name__ == "__main__":
    main()
