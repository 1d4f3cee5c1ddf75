"""A third-party MCP server for agent tests (stdio): one tool, `make_marker`, that writes a file in its working
directory, unannotated, so a CLI treats it as a tool that may change things and asks before calling it."""

from __future__ import annotations

from pathlib import Path

from mcp.server import MCPServer

app = MCPServer("marker")


@app.tool(description="Create an empty marker file in the current folder")
def make_marker(name: str) -> str:
    Path(name).write_text("")
    return f"made {name}"


if __name__ == "__main__":
    app.run()
