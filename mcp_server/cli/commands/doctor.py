"""`agentqueue doctor [--json]`: one line per check (cli/doctor_checks.py), each problem with its fix."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..parser import add_command, json_flag

MARKS = {"ok": ("✔", "green"), "fail": ("✘", "bold red"), "warn": ("!", "yellow"), "info": ("·", "dim")}


def register(sub: argparse._SubParsersAction) -> None:
    command = add_command(
        sub, "doctor", "check the setup and say how to fix each problem", run,
        "Check git and its identity, gh, each agent CLI (as the daemon finds it), the daemon and whether it runs "
        "with config.toml and policy.toml as they are now, the token file's mode, every client config that "
        "points at AgentQueue and each [notify] URL. Exit status 1 on a problem.")
    json_flag(command)


def run(args: argparse.Namespace, home: Path) -> int:
    from dataclasses import asdict

    from ... import __version__
    from ...visible import visible
    from ..doctor_checks import run_checks
    from ..output import console, print_json

    checks = run_checks(home)
    problems = sum(c.level == "fail" for c in checks)
    if args.json:
        print_json({"home": str(home), "version": __version__, "ok": problems == 0, "problems": problems,
                    "checks": [asdict(c) for c in checks]})
        return 1 if problems else 0
    from rich.text import Text

    # A detail quotes what a CLI, a config file or git printed: shown, never obeyed.
    out = console()
    out.print(Text.assemble(("AgentQueue doctor", "bold"), visible(f" {__version__}  home {home}")))
    for check in checks:
        mark, style = MARKS[check.level]
        out.print(Text.assemble((f"{mark} ", style), (visible(check.name), "bold"),
                                f"  {visible(check.detail, multiline=True)}"))
        if check.fix:
            out.print(Text.assemble(("    fix: ", "dim"), visible(check.fix, multiline=True)))
    warnings = sum(c.level == "warn" for c in checks)
    summary = f"{problems} problem(s)" if problems else "No problems"
    summary += f", {warnings} warning(s)" if warnings else ""
    out.print(Text(summary + ".", style="bold red" if problems else "green"))
    return 1 if problems else 0
