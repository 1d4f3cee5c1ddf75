"""The `agentqueue` command. Subcommands import their heavy modules lazily: `mcp` imports none."""

from __future__ import annotations

import argparse
import sys

from . import __version__


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentqueue", description="A queue of AI coding-agent tasks, over MCP.")
    parser.add_argument("--version", action="version", version=f"agentqueue {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the daemon for AGENTQUEUE_HOME")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=None,
                       help="HTTP port (default: config.toml [server] port, AGENTQUEUE_PORT, else 8765; 0 picks a free one)")
    serve.add_argument("--no-http", action="store_true", help="serve only the local socket")
    mcp = sub.add_parser("mcp", help="the stdio plugin MCP clients launch")
    mcp.add_argument("--standalone", action="store_true", help="serve MCP in this process, no daemon")
    sub.add_parser("status", help="projects, agents and task counts")
    sub.add_parser("stop", help="stop the daemon cleanly")
    install = sub.add_parser("install", help="add AgentQueue to an MCP client's config")
    install.add_argument("client", choices=["claude-desktop", "claude-code", "cursor", "vscode"])
    install.add_argument("--dry-run", action="store_true")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    from . import paths

    home = paths.home()
    if args.command == "mcp" and not args.standalone:
        from . import plugin

        sys.exit(plugin.main())
    if args.command == "mcp":
        from .standalone import run_standalone

        sys.exit(run_standalone(home))
    if args.command == "serve":
        from . import daemon, settings

        port = args.port
        if port is None:
            try:
                port = settings.load(home).port
            except settings.ConfigError as error:
                print(str(error), file=sys.stderr)
                sys.exit(paths.EXIT_CANNOT_START)
        sys.exit(daemon.serve(home, args.host, port, not args.no_http))
    if args.command == "stop":
        from . import daemon

        stopped, message = daemon.stop(home)
        print(message)
        sys.exit(0 if stopped else 1)
    if args.command == "status":
        from .status_view import print_status

        sys.exit(print_status(home))
    if args.command == "install":
        from .install import install

        _, message = install(args.client, home, args.dry_run)
        print(message)


if __name__ == "__main__":
    main()
