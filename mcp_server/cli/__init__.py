"""The `agentqueue` command: `main` runs it, `run` runs it in this process at a fixed width (for tests).

Each command is one module of `commands/` (its parser, its run, its heavy imports inside); `parser.py`
puts them together. `agentqueue mcp` is what MCP clients launch, every time they start: its flags are
read by hand (`mcp_flags`) and it never builds the argparse tree or imports `argparse`; anything unusual
there (`--help`, a typo, a bad toolset) goes the ordinary way, so argparse still words every error.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the `mcp` path must stay light)
if TYPE_CHECKING:
    import argparse
    from pathlib import Path
    from typing import Any, TextIO


def mcp_flags(argv: list[str]) -> tuple[bool, dict[str, Any]] | None:
    """(standalone, client options) of `agentqueue mcp`'s arguments when they are only its own well-formed
    flags, else None: the caller then lets argparse read them, and word any error."""
    from ..server.toolsets import client_options, parse_toolsets

    standalone, read_only, toolsets = False, False, None
    rest = list(argv)
    while rest:
        flag = rest.pop(0)
        if flag == "--standalone":
            standalone = True
        elif flag == "--read-only":
            read_only = True
        elif (flag == "--toolsets" and rest) or flag.startswith("--toolsets="):
            value = rest.pop(0) if flag == "--toolsets" else flag.partition("=")[2]
            try:
                toolsets = parse_toolsets(value)
            except ValueError:
                return None
        else:
            return None
    return standalone, client_options(read_only, toolsets)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["mcp"] and (flags := mcp_flags(argv[1:])) is not None:
        run_mcp(*flags)  # the path every client launch takes: no argparse tree
    sys.exit(_main(argv))


def run(argv: list[str], stdout: TextIO, stderr: TextIO, width: int | None = 80) -> int:
    """`agentqueue ARGV` in this process, its output written to `stdout`/`stderr` and laid out in `width`
    columns; returns the exit status (argparse's refusals included)."""
    import os
    from contextlib import redirect_stderr, redirect_stdout

    from .output import at_width

    columns = os.environ.get("COLUMNS")
    if width is not None:
        os.environ["COLUMNS"] = str(width)  # argparse's help reads it
    with redirect_stdout(stdout), redirect_stderr(stderr), at_width(width):
        try:
            return _main(argv)
        except SystemExit as exit:  # as the interpreter ends a process: a message goes to stderr, status 1
            if exit.code is None or isinstance(exit.code, int):
                return exit.code or 0
            print(exit.code, file=sys.stderr)
            return 1
        finally:
            if width is not None:
                if columns is None:
                    os.environ.pop("COLUMNS", None)
                else:
                    os.environ["COLUMNS"] = columns


def _main(argv: list[str]) -> int:
    from .parser import build_parser

    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()  # bare `agentqueue`: the help, and success (asking for it is not an error)
        return 0
    from .. import paths

    return _run_command(args, paths.home())


def run_mcp(standalone: bool, options: dict[str, Any]) -> None:
    """`agentqueue mcp`: the relay to the daemon (stdlib only), or with --standalone the whole server here."""
    if not standalone:
        from ..daemon import relay

        sys.exit(relay.main(options))
    from .. import paths
    from ..standalone import run_standalone

    sys.exit(run_standalone(paths.home(), options))


def _run_command(args: argparse.Namespace, home: Path) -> int:
    """Run the command; a refusal is one sentence on stderr and exit status 1, never a traceback."""
    from ..services.errors import ServiceError
    from ..settings import ConfigError
    from ..store.base import StoreOpenError  # not store.db: that imports sqlite-utils, which a read does not need
    from ..visible import visible
    from .output import CliError

    try:
        return args.run(args, home)
    except (CliError, ServiceError, StoreOpenError) as error:  # the message may quote a title, a branch, git's words
        print(f"agentqueue {args.command}: {visible(_refusal(str(error), home), multiline=True)}", file=sys.stderr)
        return 1
    except ConfigError as error:  # config.toml's own words: the key, the value and what it takes
        print(f"agentqueue {args.command}: {visible(str(error), multiline=True)} Fix the file (`agentqueue doctor` "
              "checks it), then run the command again.", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `agentqueue logs x | head`
        return 0


def _refusal(message: str, home: Path) -> str:
    """A refusal as the terminal says it: the commands instead of the tools it names, and for an unknown task or
    project id the closest ones."""
    import re

    from .advice import terminal_words, with_suggestions
    from .reads import open_store_for_reading

    about = re.match(r"Task '([\w-]{1,100})' ", message)  # a refusal about one task: its bare tool names take its id
    return with_suggestions(terminal_words(message, about.group(1) if about else None),
                            lambda: open_store_for_reading(home))


if __name__ == "__main__":
    main()
