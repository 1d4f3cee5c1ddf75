"""`agentqueue allow REQUEST [--remember]` and `agentqueue deny REQUEST`: answer an agent's permission request.

They call answer_request through the daemon, with the same checks as a model's call (an allow asks on the
terminal under the `standard` preset); the waiting agent goes on with the answer. Notifications quote them.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ...visible import visible
from ..output import call_daemon_tool, print_json
from ..parser import add_command, json_flag


def register(sub: argparse._SubParsersAction) -> None:
    allow = add_command(sub, "allow", "allow an agent's permission request (its run goes on)", run_allow)
    allow.add_argument("request", help="request id (req-…), from the notification or list_requests")
    allow.add_argument("--remember", action="store_true", help="also add the request's rule to the project's policy")
    json_flag(allow)
    deny = add_command(sub, "deny", "deny an agent's permission request (its run goes on without it)", run_deny)
    deny.add_argument("request", help="request id (req-…)")
    deny.add_argument("--remember", action="store_true", help="also add the rule to the policy's deny list")
    deny.add_argument("--message", help="what the agent is told, e.g. what to do instead")
    json_flag(deny)


def _answer(args: argparse.Namespace, home: Path, decision: str) -> int:
    arguments = {"request_id": args.request, "decision": decision, "remember": bool(args.remember)}
    if getattr(args, "message", None):
        arguments["message"] = args.message
    request = call_daemon_tool(home, "answer_request", arguments)
    if args.json:
        print_json(request)
        return 0
    print(visible(f"{request['status'].capitalize()} {request['id']}: {request['action'][:200]} "
                  f"(task {request['task_id']})."))
    return 0


def run_allow(args: argparse.Namespace, home: Path) -> int:
    return _answer(args, home, "allow")


def run_deny(args: argparse.Namespace, home: Path) -> int:
    return _answer(args, home, "deny")
