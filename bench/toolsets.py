"""Tool-list size per toolset: what `--toolsets X` (and `--read-only`) put in the model's context.

The same measure as the token-budget test and `coldstart.py`: the JSON of name, description and
input schema, over 4 characters per token. Sizes, not timings: one run is exact.

    python bench/toolsets.py            # prints a Markdown table and one JSON line
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import anyio
from mcp import Client

from agentqueue.app import build_server
from agentqueue.services import Services
from agentqueue.toolsets import NAMED_TOOLSETS, TOOLSETS, connection_options


async def measure(home: Path, options: dict) -> tuple[int, int]:
    services = Services(home)
    try:
        async with Client(build_server(services, options)) as client:
            tools = (await client.list_tools()).tools
    finally:
        services.close()
    definitions = json.dumps([{"name": t.name, "description": t.description, "inputSchema": t.input_schema}
                              for t in tools])
    return len(tools), len(definitions) // 4


async def main() -> None:
    rows: dict[str, tuple[int, int]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        rows["(all)"] = await measure(home, {})
        rows["--read-only"] = await measure(home, connection_options(read_only=True))
        for name in (*TOOLSETS, *NAMED_TOOLSETS):
            rows[name] = await measure(home, connection_options(toolsets=[name]))
    print("| selection | tools | ≈ tokens | per tool |\n|---|---:|---:|---:|")
    for name, (count, tokens) in rows.items():
        print(f"| {name} | {count} | {tokens} | {tokens / max(count, 1):.0f} |")
    print(json.dumps({name: {"tools": c, "approx_tokens": t} for name, (c, t) in rows.items()}))


if __name__ == "__main__":
    anyio.run(main)
