"""The SDK floor for the launch benchmark: a one-tool MCPServer on stdio."""

from mcp.server import MCPServer

mcp = MCPServer("minimal")


@mcp.tool()
def echo(text: str) -> str:
    """Echo the text."""
    return text


if __name__ == "__main__":
    mcp.run()
