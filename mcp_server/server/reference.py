"""The tool, resource and prompt reference in docs/reference.md, generated from the live server.

`python -m agentqueue.server.reference` rewrites the file; `--check` exits 1 when it is stale (a test runs
the same comparison), so the reference is always the record of what the server really offers.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from .app import build_server
from ..services import Services
from ..services.policy_rules import PRESETS
from ..tools import SPECS
from .toolsets import ALL, NAMED_TOOLSETS, SUMMARIES, TOOLSETS

DOC = Path("docs") / "reference.md"  # relative to the repository root, where the command is run

HEADER = """# AgentQueue reference

Generated from the live server by `python -m agentqueue.server.reference` (a test fails when this file is
stale). Every tool returns structured content; a failure is a tool error whose text says what to do.
`project_id`, where optional, defaults to the connection's active project (`set_active_project`).
"""


def _type(schema: dict[str, Any]) -> str:
    if "enum" in schema:
        return " \\| ".join(json.dumps(v) for v in schema["enum"])
    if "anyOf" in schema:
        return " or ".join(_type(s) for s in schema["anyOf"])
    kind = schema.get("type", "any")
    if kind == "array":
        return f"list of {_type(schema.get('items', {}))}"
    return str(kind)


def _param(name: str, schema: dict[str, Any], required: bool) -> str:
    text = f"`{name}`{'*' if required else ''}: {_type(schema)}"
    if "default" in schema and schema["default"] not in (None, [], {}):
        text += f" = {json.dumps(schema['default'])}"
    if schema.get("description"):
        text += f" — {schema['description']}"
    return text


async def _collect(home: Path) -> dict[str, Any]:
    services = Services(home)
    try:
        async with Client(build_server(services), mode="legacy") as lean:  # what a client gets without flags
            default = (await lean.list_tools()).tools
        async with Client(build_server(services, {"toolsets": [ALL]}), mode="legacy") as client:
            return {"tools": (await client.list_tools()).tools, "resources": (await client.list_resources()).resources,
                    "templates": (await client.list_resource_templates()).resource_templates,
                    "prompts": (await client.list_prompts()).prompts, "default": default}
    finally:
        services.close()


def render() -> str:
    with tempfile.TemporaryDirectory(prefix="agentqueue-reference-") as tmp:
        found = anyio.run(_collect, Path(tmp))
    tools = sorted(found["tools"], key=lambda t: t.name)
    default = {t.name for t in found["default"]}

    def size(listed: list[Any]) -> int:
        return len(json.dumps([{"name": t.name, "description": t.description, "inputSchema": t.input_schema}
                               for t in listed]))

    lines = [HEADER, f"## Tools ({len(tools)})", "",
             f"The definitions a client sends its model (name, description, input schema): by default "
             f"{len(default)} tools, {size(found['default']):,} characters "
             f"(≈ {size(found['default']) // 4:,} tokens at 4 "
             f"characters a token); all {len(tools)}, {size(tools):,} characters (≈ {size(tools) // 4:,}). `*` marks a "
             "required parameter; *default* a tool a client lists without `--toolsets`.", ""]
    for tool in tools:
        hints = tool.annotations
        marks = [m for m, on in (("default", tool.name in default), ("read-only", hints and hints.read_only_hint),
                                 ("destructive", hints and hints.destructive_hint)) if on]
        lines.append(f"### `{tool.name}`" + (f" ({', '.join(marks)})" if marks else ""))
        lines += ["", tool.description or "", ""]
        schema = tool.input_schema or {}
        required = set(schema.get("required", []))
        params = schema.get("properties", {})
        lines += [f"- {_param(name, sub, name in required)}" for name, sub in params.items()] or ["- (no parameters)"]
        output = (tool.output_schema or {}).get("properties", {})
        if output:
            lines.append(f"- returns: {', '.join(f'`{key}`' for key in output)}")
        lines.append("")
    lines += ["## Resources", "",
              "Each is kept current with `notifications/resources/updated` in both protocol eras.", ""]
    for resource in sorted(found["resources"], key=lambda r: str(r.uri)):
        lines.append(f"- `{resource.uri}` ({resource.mime_type}) — {resource.description}")
    for template in sorted(found["templates"], key=lambda t: t.uri_template):
        lines.append(f"- `{template.uri_template}` ({template.mime_type}) — {template.description}")
    lines += ["", "## Prompts", ""]
    for prompt in sorted(found["prompts"], key=lambda p: p.name):
        args = ", ".join(f"`{a.name}`{'*' if a.required else ''}" for a in prompt.arguments or [])
        lines.append(f"- `{prompt.name}`" + (f" ({args})" if args else "") + f" — {prompt.description}")
    lines += _presets() + _toolsets(found["tools"])
    return "\n".join(lines).rstrip() + "\n"


def _presets() -> list[str]:
    """Each preset's defaults and exact rules, as the policy engine holds them."""
    lines = ["", "## Policy presets", "",
             "Rules are checked deny → allow → ask, then the preset's default. `tool:` rules are AgentQueue's own "
             "tools; the others are agent actions in Claude Code's syntax. Set with `edit_policy(preset=…)`.", ""]
    for preset in PRESETS.values():
        lines += [f"### `{preset.name}`", "", preset.summary + ".", "",
                  f"- default for agent actions: {preset.agent_default}; for AgentQueue tools: {preset.tool_default}"
                  + (" (read-only tools allowed)" if preset.tool_allow_read_only else "")]
        for kind in ("deny", "allow", "ask"):
            rules = getattr(preset, kind)
            if rules:
                lines.append(f"- {kind}: " + ", ".join(f"`{rule}`" for rule in rules))
        lines.append("")
    return lines


def _toolsets(tools: list[Any]) -> list[str]:
    """What `--toolsets` accepts, with the tools each selects."""
    groups = {name: sorted(s.name for s in SPECS.values() if s.group == name) for name in TOOLSETS}
    groups.update({name: sorted(members) for name, members in NAMED_TOOLSETS.items() if members})
    lines = ["## Toolsets", "",
             "A client that names no toolsets lists `default` (or what `[mcp] toolsets` in config.toml says) and may "
             "add the rest for its connection with `enable_toolsets`, which sends `notifications/tools/list_changed`. "
             "`agentqueue mcp --toolsets a,b` (also `--standalone`, and `serve` for HTTP clients) offers only those "
             "tools, fixed; with `default` or `all` among them the connection may still enable more. `all` is every "
             "tool; `--read-only` keeps only the read-only ones.", ""]
    lines += [f"- `{name}` ({SUMMARIES.get(name, '')}): " + ", ".join(f"`{tool}`" for tool in members)
              for name, members in groups.items()]
    lines.append(f"- `{ALL}` ({SUMMARIES[ALL]})")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agentqueue.server.reference", description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    parser.add_argument("--out", type=Path, default=DOC, help="default: docs/reference.md")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        stale = not args.out.exists() or args.out.read_text(encoding="utf-8") != text
        print(f"{args.out} is {'stale: run python -m agentqueue.server.reference' if stale else 'up to date'}")
        return 1 if stale else 0
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
