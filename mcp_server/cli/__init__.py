"""The `agentqueue` command. Subcommands import their heavy modules lazily: `mcp` imports none.

`agentqueue mcp` is what MCP clients launch, every time they start: its flags are read by hand
(`mcp_flags`) and it never builds the argparse tree or imports `argparse`; anything unusual there
(`--help`, a typo, a bad toolset) goes the ordinary way, so argparse still words every error.
"""

from __future__ import annotations

import sys

from .. import __version__

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the `mcp` path must stay light)
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable
    from pathlib import Path
    from typing import Any

DESCRIPTION = """\
AgentQueue runs a queue of AI coding-agent tasks (Claude Code, Codex, Gemini
or any command) in git worktrees of your repos. Your MCP client (Claude Code,
Claude Desktop, Cursor, VS Code) is where you talk to it; this command sets it
up and shows what is happening. Data lives in AGENTQUEUE_HOME (default: the
platform's user data dir)."""

EPILOG = """\
first steps:
  agentqueue install claude-code   add it to a client (or claude-desktop,
                                   cursor, vscode)
  agentqueue doctor                check git, agent CLIs, daemon, client configs
  agentqueue status --watch        watch the queue

Every read command takes --json; `agentqueue COMMAND --help` describes one."""


def _help_formatter() -> type[argparse.HelpFormatter]:
    """The top-level help's formatter (a function, so `argparse` is imported only when a parser is built)."""
    import argparse

    class Help(argparse.RawDescriptionHelpFormatter):
        """Lists the commands without argparse's `{install,doctor,…}` header line."""

        def __init__(self, prog: str) -> None:
            super().__init__(prog, max_help_position=18)
            self._action_max_length = 14  # room for "uninstall" beside its help

        def _format_action(self, action: argparse.Action) -> str:
            text = super()._format_action(action)
            if action.nargs == argparse.PARSER:
                text = "\n".join(text.split("\n")[1:])
            return text

    return Help


CLIENT_CHOICES = ["claude-desktop", "claude-code", "cursor", "vscode"]


def _parser() -> argparse.ArgumentParser:
    import argparse

    parser = argparse.ArgumentParser(prog="agentqueue", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=_help_formatter())
    parser.add_argument("--version", action="version", version=f"agentqueue {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")

    def add(name: str, summary: str, description: str | None = None) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=summary, description=description or summary[0].upper() + summary[1:] + ".",
                              formatter_class=argparse.HelpFormatter)

    def json_flag(command: argparse.ArgumentParser) -> None:
        command.add_argument("--json", action="store_true", help="print JSON instead of text")

    # -- setup ------------------------------------------------------------------------------------
    install = add("install", "add AgentQueue to an MCP client's config (or --remove it)",
                  "Add AgentQueue to an MCP client's config, naming this install's `agentqueue` by absolute path "
                  "and pinning AGENTQUEUE_HOME. The old file is backed up. Claude Code is configured with "
                  "`claude mcp add-json -s user` when the claude CLI is found. Also records the paths of the "
                  "claude/codex/gemini/gh CLIs this terminal finds in $AGENTQUEUE_HOME/config.toml [cli].")
    install.add_argument("client", choices=CLIENT_CHOICES)
    install.add_argument("--remove", action="store_true", help="take the AgentQueue entry out instead")
    install.add_argument("--dry-run", action="store_true", help="show what would change, change nothing")
    doctor = add("doctor", "check the setup and say how to fix each problem",
                 "Check git and its identity, gh, each agent CLI (as the daemon finds it), the daemon, the token "
                 "file's mode and every client config that points at AgentQueue. Exit status 1 on a problem.")
    json_flag(doctor)
    uninstall = add("uninstall", "remove AgentQueue from every client, stop it, prune its worktrees and branches",
                    "Remove our entry from every client config, stop the daemon, remove our worktrees and the "
                    "task branches (<task_id>/<slug>) of known tasks from your repos. Branches with work not in "
                    "the default branch, and the data directory, are kept unless --purge.")
    uninstall.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    uninstall.add_argument("--purge", action="store_true",
                           help="also delete unmerged task branches and the data directory")

    # -- the daemon -------------------------------------------------------------------------------
    serve = add("serve", "run the daemon for AGENTQUEUE_HOME (clients start it on demand)",
                "Run the daemon: the engine plus MCP over a local socket (for `agentqueue mcp`) and over HTTP "
                "with a bearer token. One daemon per AGENTQUEUE_HOME; clients start it when none runs.")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=None,
                       help="HTTP port (default: config.toml [server] port, AGENTQUEUE_PORT, else 8765; 0 picks a free one)")
    serve.add_argument("--no-http", action="store_true", help="serve only the local socket")
    serve.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                       help="a Host name HTTP clients use (repeatable); needed with a --host beyond loopback")
    selection_flags(serve, "HTTP clients")
    mcp = add("mcp", "the stdio MCP server that clients launch (not for typing)",
              "The stdio plugin MCP clients launch: it relays to the daemon, starting it if needed.")
    mcp.add_argument("--standalone", action="store_true", help="serve MCP in this process, no daemon")
    selection_flags(mcp, "this client")
    stop = add("stop", "stop the daemon (asks first when agents are running)",
               "Stop the daemon. Running agents are interrupted and their tasks recovered at the next start; "
               "they are listed first, and on a terminal you are asked. Without a terminal, --force is needed.")
    stop.add_argument("--force", action="store_true", help="stop even though agents are running, without asking")

    # -- reading the queue ------------------------------------------------------------------------
    status = add("status", "the queue at a glance: daemon, task states, running agents, warnings")
    status.add_argument("--watch", action="store_true", help="refresh every second until Ctrl-C")
    json_flag(status)
    tasks = add("tasks", "list tasks (completed ones hidden unless --all)")
    tasks.add_argument("--project", help="only this project's tasks")
    tasks.add_argument("--status", help="only these statuses (e.g. BLOCKED or READY,DEFINED)")
    tasks.add_argument("--all", action="store_true", help="include COMPLETED tasks")
    json_flag(tasks)
    show = add("show", "one task: status, reason and next step, attempts, branch/PR, files, last result")
    show.add_argument("task", help="task id, e.g. swift-falcon")
    json_flag(show)
    logs = add("logs", "print a task's agent log; -f follows it while the agent runs",
               "Print $AGENTQUEUE_HOME/logs/tasks/<task>.log. With -f, keep printing what the agent writes "
               "until the task is no longer READY, ASSIGNED, IN_PROGRESS or VERIFYING (Ctrl-C stops).")
    logs.add_argument("task", help="task id")
    logs.add_argument("-f", "--follow", action="store_true", help="follow the log as the agent writes it")
    json_flag(logs)
    diff = add("diff", "the changes a task made (its branch against the default branch)")
    diff.add_argument("task", help="task id")
    json_flag(diff)
    usage = add("usage", "tokens and cost, by project (or by task for --project)")
    usage.add_argument("--project", help="one project, broken down by task")
    usage.add_argument("--task", help="one task, broken down by agent")
    usage.add_argument("--since", type=float, metavar="HOURS", help="only the last HOURS hours")
    json_flag(usage)

    board = add("board", "open the board in a browser (starts the daemon if needed)",
                "Open the board: the queue, a kanban per project, agents, task pages with live logs and diffs, "
                "usage. Logs in with a one-time link (2 minutes); the session lasts 12 hours.")
    board.add_argument("--no-open", action="store_true", help="print the login link instead of opening a browser")
    json_flag(board)

    chat = add("chat", "talk to the queue in this terminal (the claude CLI with AgentQueue's tools)",
               "Chat with the dispatcher: the real `claude` CLI (as the engine finds it) with AgentQueue's MCP "
               "server and the dispatcher prompt. The queue speaks up when a task completes, fails, blocks or "
               "asks permission; /allow and /deny answer. Ctrl-C stops a reply, Ctrl-D leaves.")
    chat.add_argument("--project", help="the active project (the dispatcher creates tasks in it)")
    chat.add_argument("--model", help="the model claude uses (e.g. sonnet, opus)")
    chat.add_argument("--resume", action="store_true", help="continue the last conversation")
    chat.add_argument("-p", "--print", dest="prompt", metavar="MESSAGE",
                      help="one turn, no prompt: print the answer (for scripts)")
    json_flag(chat)

    # -- acting on it (through the daemon, with the same checks as the MCP tools) ----------------------
    approve = add("approve", "approve a task AWAITING_APPROVAL (its work lands, dependents may start)")
    approve.add_argument("task", help="task id")
    json_flag(approve)
    for name, verb in (("pause", "stop starting new tasks"), ("resume", "start tasks again")):
        command = add(name, f"{verb}: one project, or with no project the whole orchestrator",
                      f"{verb[0].upper() + verb[1:]} for PROJECT, or with no PROJECT for the whole orchestrator. "
                      "Running agents finish.")
        command.add_argument("project", nargs="?", help="project id (omit for all projects)")
        json_flag(command)
    return parser


def selection_flags(parser: argparse.ArgumentParser, who: str) -> None:
    """--read-only and --toolsets: which tools a connection offers (the rest are left out of its list)."""
    from ..toolsets import known, parse_toolsets

    parser.add_argument("--read-only", action="store_true", help=f"offer {who} only the read-only tools")
    parser.add_argument("--toolsets", type=_toolsets_arg(parse_toolsets), metavar="SET,…",
                        help=f"offer {who} only these groups of tools: {', '.join(known())}")


def _toolsets_arg(parse: Callable[[str], list[str]]) -> Callable[[str], list[str]]:
    import argparse

    def convert(text: str) -> list[str]:
        try:
            return parse(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
    return convert


def mcp_flags(argv: list[str]) -> tuple[bool, dict[str, Any]] | None:
    """(standalone, client options) of `agentqueue mcp`'s arguments when they are only its own well-formed
    flags, else None: the caller then lets argparse read them, and word any error."""
    from ..toolsets import client_options, parse_toolsets

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
        _mcp(*flags)  # the path every client launch takes: no argparse tree
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()  # bare `agentqueue`: the help, and success (asking for it is not an error)
        sys.exit(0)
    from .. import paths

    home = paths.home()
    if args.command == "mcp":
        from ..toolsets import client_options

        _mcp(args.standalone, client_options(args.read_only, args.toolsets))
    if args.command == "serve":
        from .. import daemon, settings

        port = args.port
        if port is None:
            try:
                port = settings.load(home).port
            except settings.ConfigError as error:
                from ..visible import visible

                print(visible(str(error), multiline=True), file=sys.stderr)
                sys.exit(paths.EXIT_CANNOT_START)
        from ..toolsets import connection_options

        sys.exit(daemon.serve(home, args.host, port, not args.no_http,
                              connection_options(args.read_only, args.toolsets), args.allow_host))
    sys.exit(_run_command(args, home))


def _mcp(standalone: bool, options: dict[str, Any]) -> None:
    """`agentqueue mcp`: the relay to the daemon (stdlib only), or with --standalone the whole server here."""
    if not standalone:
        from .. import plugin

        sys.exit(plugin.main(options))
    from .. import paths
    from ..standalone import run_standalone

    sys.exit(run_standalone(paths.home(), options))


def _run_command(args: argparse.Namespace, home: Path) -> int:
    """The human commands; a refusal is one sentence on stderr and exit status 1, never a traceback."""
    from .output import CliError
    from ..services.errors import ServiceError
    from ..store.base import StoreOpenError  # not store.db: that imports sqlite-utils, which a read does not need
    from ..visible import visible

    try:
        return _dispatch(args, home)
    except (CliError, ServiceError, StoreOpenError) as error:  # the message may quote a title, a branch, git's words
        print(f"agentqueue {args.command}: {visible(str(error), multiline=True)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `agentqueue logs x | head`
        return 0


def _dispatch(args: argparse.Namespace, home: Path) -> int:
    from .output import CliError

    command = args.command
    if command == "install":
        from .client_configs import run

        print(run(args.client, home, dry_run=args.dry_run, remove=args.remove))
        return 0
    if command == "doctor":
        from .doctor_checks import doctor

        return doctor(home, args.json)
    if command == "uninstall":
        from .commands.uninstall import uninstall

        return uninstall(home, yes=args.yes, purge=args.purge)
    if command == "stop":
        from .commands.stop import stop

        return stop(home, args.force)
    if command == "status":
        from .commands.status import print_status

        return print_status(home, as_json=args.json, watch=args.watch)
    if command == "board":
        from .commands.board import open_board

        return open_board(home, args.no_open, args.json)
    if command == "chat":
        from ..chat.repl import run as chat

        if args.json and args.prompt is None:
            raise CliError("--json goes with -p MESSAGE (one turn for a script); the interactive chat has no JSON.")
        return chat(home, args.project, args.model, args.resume, args.prompt, args.json)
    if command in ("approve", "pause", "resume"):
        from .commands import stop as cli_actions

        if command == "approve":
            return cli_actions.approve(home, args.task, args.json)
        return cli_actions.pause_or_resume(home, command, args.project, args.json)
    from .commands import tasks as cli_views

    if command == "tasks":
        return cli_views.tasks(home, args.project, args.status, args.all, args.json)
    if command == "show":
        return cli_views.show(home, args.task, args.json)
    if command == "logs":
        return cli_views.logs(home, args.task, args.follow, args.json)
    if command == "diff":
        return cli_views.diff(home, args.task, args.json)
    if command == "usage":
        return cli_views.usage(home, args.project, args.task, args.since, args.json)
    raise AssertionError(f"unhandled command {command}")


if __name__ == "__main__":
    main()
