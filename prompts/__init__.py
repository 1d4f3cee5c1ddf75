"""Markdown templates for MCP prompts and the server instructions (shipped in the wheel)."""

from importlib.resources import files


def load(name: str) -> str:
    """The text of `<name>.md`."""
    return (files(__name__) / f"{name}.md").read_text(encoding="utf-8")
