"""`agentqueue install CLIENT [--remove] [--dry-run]`: add AgentQueue to an MCP client's config, record the
agent CLIs."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from ..client_configs import CLIENTS
from ..parser import add_command


def register(sub: argparse._SubParsersAction) -> None:
    command = add_command(
        sub, "install", "add AgentQueue to an MCP client's config (or --remove it)", run,
        "Add AgentQueue to an MCP client's config, naming this install's `agentqueue` by absolute path "
        "and pinning AGENTQUEUE_HOME. The old file is backed up. Claude Code is configured with "
        "`claude mcp add-json -s user` when the claude CLI is found. Also records the paths of the "
        "claude/codex/gemini/gh CLIs this terminal finds in $AGENTQUEUE_HOME/config.toml [cli].")
    command.add_argument("client", nargs="?", choices=list(CLIENTS))
    command.add_argument("--remove", action="store_true", help="take the AgentQueue entry out instead")
    command.add_argument("--dry-run", action="store_true", help="show what would change, change nothing")
    skill = command.add_argument_group(
        "the skill", "--skill adds instead the skill that teaches agents `agentqueue task …` (for agents without "
                     "MCP): to a repository's .claude/skills and .agents/skills, or with --user to yours")
    skill.add_argument("--skill", action="store_true", help="add the agent skill instead of a client entry")
    where = skill.add_mutually_exclusive_group()
    where.add_argument("--repo", metavar="PATH", help="the repository (default: the current folder's)")
    where.add_argument("--user", action="store_true", help="your own skills (~/.claude/skills, ~/.agents/skills)")


def run(args: argparse.Namespace, home: Path) -> int:
    from ..output import CliError

    if args.skill:
        if args.client:
            raise CliError(f"--skill adds the agent skill, not a client: run `agentqueue install {args.client}` "
                           "and `agentqueue install --skill` separately.")
        from ..skill import install

        print(install(args.repo, args.user, dry_run=args.dry_run, remove=args.remove))
        return 0
    if args.repo or args.user:
        raise CliError("--repo and --user go with --skill (`agentqueue install --skill --user`).")
    if not args.client:
        raise CliError(f"name a client ({', '.join(CLIENTS)}), or --skill for the agent skill.")
    print(report(args.client, home, dry_run=args.dry_run, remove=args.remove))
    return 0


def report(client: str, home: Path, dry_run: bool = False, remove: bool = False) -> str:
    """What `agentqueue install` prints: the change, the command and home it pins, the CLI paths recorded."""
    from .. import agent_cli_paths
    from ..client_configs import install, server_entry

    _, message = install(client, home, dry_run=dry_run, remove=remove)
    lines = [message]
    if not remove:
        entry = server_entry(client, home)
        lines.append(f"  command: {shlex.join([entry['command'], *entry['args']])}")
        lines.append(f"  home:    {home}")
        recorded = agent_cli_paths.record(home, dry_run=dry_run)
        if recorded:
            lines.append(recorded)
        if not dry_run:
            lines.append("Check the setup with `agentqueue doctor`.")
    return "\n".join(lines)
