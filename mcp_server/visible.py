"""`visible(text)`: text from a task, an agent or a repo, made safe to print on a terminal.

A terminal obeys the escape sequences in what it prints (OSC 52 writes the clipboard, OSC 8 makes a
link, CSI moves the cursor or clears the screen, OSC 0 retitles the window); C1 characters do the same
in one code point, a lone `\\r` lets a line overwrite itself, and bidi overrides reorder what the
person reads. Each such character is printed as its Python escape (`\\x1b`, `\\x9b`, `\\u202e`), so the
person sees what is there and nothing acts. Rich markup is a separate matter: print the result as a
`rich.text.Text` (never as a markup string), so `[red]` or `[/x]` in a title shows as typed.
Stdlib only: the CLI, the chat and the daemon client all use it.
"""

from __future__ import annotations

import re

# Control characters (C0 but tab, newline and CR; DEL; C1), the bidi marks, embeddings, overrides and
# isolates, the Unicode line and paragraph separators, and lone surrogates (which cannot be encoded).
_CONTROLS = r"\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f"
_UNICODE = r"\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff"
_ONE_LINE = re.compile(rf"[\t\n\r{_CONTROLS}{_UNICODE}]")
# A multi-line body keeps its newlines and tabs, and a `\r` that ends a line (CRLF files, Windows tools):
# it returns the cursor on a line about to end, so it cannot overwrite what was printed.
_LINES = re.compile(rf"\r(?!\n)|[{_CONTROLS}{_UNICODE}]")
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def visible(text: str, multiline: bool = False) -> str:
    """text with every control, escape and bidi character shown as its escape (`\\x1b`, `\\u202e`).

    One line (a title, a branch, an action) also shows `\\n` and `\\t`; `multiline=True` (a log, a
    diff, a description, an error) keeps newlines, tabs and the `\\r` of a CRLF line end."""
    return (_LINES if multiline else _ONE_LINE).sub(_escape, text)
