"""What a call of one of AgentQueue's own MCP tools amounts to under the policy, and the decision.

A call becomes one or more actions: `tool:<name>` (with a detail where it matters: the command,
"<repo> <branch>", the id), plus the commands it defines for AgentQueue to execute later (a
`command` agent, a hook's shell steps, a project's verify command), checked as
`tool:run_command:<command>` now, because defining them is when a person can approve them. The
strictest verdict of all of them decides (deny, then ask, then allow).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Callable
from urllib.parse import unquote, urlparse

from .errors import NotFoundError, ServiceError
from .policy import Verdict, is_rule
from .policy_rules import Action, Decision, split_action, tool_action

_STRICTNESS: dict[Decision, int] = {"allow": 0, "ask": 1, "deny": 2}


@dataclass(frozen=True)
class Step:
    action: Action
    what: str  # the action as a person reads it: "Run `rm -rf build`"


@dataclass(frozen=True)
class CallDecision:
    """The policy's answer for one tool call, with everything the audit log and a question need."""

    decision: Decision
    step: Step  # the step that decided
    verdict: Verdict
    project_id: str | None
    task_id: str | None
    decided_by: str
    # Allow rules that would let this call run: one per part of a compound command not yet allowed.
    suggested: tuple[str, ...] = ()

    @property
    def action(self) -> str:
        return str(self.step.action)

    def question(self) -> str:
        """The one sentence a person is asked: the action, the project, why it asks."""
        where = f" in project {self.project_id}" if self.project_id else ""
        return f"{self.step.what}{where}? AgentQueue's policy asks before this ({self.verdict.decided_by})."


def _in_user_home(real: Path) -> bool:
    """The default root: the user's home folder, but none of its hidden folders (~/.ssh, ~/.aws, ~/.config…)."""
    home = Path(os.path.realpath(Path.home()))
    return real.is_relative_to(home) and not any(part.startswith(".") for part in real.relative_to(home).parts)


def local_clone_source(url: str | None) -> list[str]:
    """The folders `git clone <url>` would read on this machine: a `file://` URL, or a path (git takes a text
    with no `:` before its first `/` as a path), with the `.git` variants git tries. Empty for a remote URL."""
    if not url:
        return []
    if url.lower().startswith("file:"):
        path = unquote(urlparse(url).path)
    elif "://" in url or ":" in url.split("/", 1)[0]:
        return []  # https://, ssh://, git@host:repo: not this machine's files
    else:
        path = url
    base = os.path.abspath(path.rstrip("/") or "/")  # relative to this process's cwd, where git runs (no `~`)
    variants = [base, f"{base}/.git", f"{base}.git", f"{base}.git/.git"]
    return list(dict.fromkeys([base, *(v for v in variants if os.path.lexists(v))]))


def _text(args: dict[str, Any], key: str) -> str | None:
    value = args.get(key)
    return value.strip() if isinstance(value, str) and value.strip() else None


class CallPolicy:
    """Builds a call's actions and asks the policy about them (plain Python, no MCP)."""

    def __init__(self, services: Any) -> None:
        self.svc = services  # Services; typed loosely to avoid an import cycle

    # -- which project a call acts in ------------------------------------------------------------
    def project_of(self, name: str, args: dict[str, Any], active: str | None) -> str | None:
        """The explicit project_id, else what the task/repo/hook/working_dir belongs to, else the active one."""
        if project := _text(args, "project_id"):
            return project
        lookups: list[tuple[str, Callable[[str], str | None]]] = [
            ("task_id", lambda v: self.svc.tasks.get(v).project_id),
            ("repo_id", lambda v: self.svc.repos.get(v).project_id),
            ("hook_id", lambda v: self.svc.hooks.get(v).project_id),
            ("request_id", lambda v: self.svc.requests.get(v).project_id),
            ("working_dir", self._project_of_dir),
        ]
        for key, lookup in lookups:
            if value := _text(args, key):
                try:
                    found = lookup(value)
                except ServiceError:
                    found = None  # the tool itself says what is wrong with the id
                if found:
                    return found
        return active

    def _project_of_dir(self, working_dir: str) -> str | None:
        if "/" not in working_dir and not working_dir.startswith((".", "~")):
            try:
                return self.svc.projects.get(working_dir).id
            except NotFoundError:
                pass
            try:
                return self.svc.repos.get(working_dir).project_id
            except NotFoundError:
                pass
        path = Path(os.path.expanduser(working_dir))
        return self.svc.files.project_of(path) if path.is_absolute() else None

    # -- what a call amounts to -------------------------------------------------------------------
    def steps(self, name: str, args: dict[str, Any], project_id: str | None) -> list[Step]:
        """The call's actions, its own first; lookups a detail needs raise the tool's own not-found error."""
        own = Step(tool_action(name), f"Call {name}")
        extra: list[Step] = []
        if name == "run_command":
            command = str(args.get("command") or "")
            own = Step(tool_action(name, command), f"Run `{command[:300]}`")
        elif name in ("git_push", "push_branch"):
            repo = self._repo(name, args, project_id)
            branch = _text(args, "branch") or _text(args, "branch_name") or self._current_branch(repo)
            own = Step(tool_action(name, f"{repo.id} {branch}"), f"Push branch {branch} of repo {repo.id} to origin")
        elif name == "git_create_pr":
            repo = self.svc.repos.get(str(args.get("repo_id")))
            branch = _text(args, "branch") or self._current_branch(repo)
            own = Step(tool_action(name, f"{repo.id} {branch}"), f"Open a pull request for {branch} of repo {repo.id}")
            extra.append(Step(tool_action("git_push", f"{repo.id} {branch}"),
                              f"Push branch {branch} of repo {repo.id} to origin (for a pull request)"))
        elif name in ("git_merge", "merge_branch"):
            repo = self._repo(name, args, project_id)
            branch = str(args.get("branch_name") or "")
            into = _text(args, "into") or repo.default_branch
            own = Step(tool_action(name, f"{repo.id} {branch}"), f"Merge {branch} into {into} in repo {repo.id}")
            if into == repo.default_branch:
                extra.append(Step(tool_action("merge_into_default", f"{repo.id} {branch}"),
                                  f"Merge {branch} into {into}, the default branch of repo {repo.id}"))
        elif name == "delete_project":
            pid = str(args.get("project_id") or "")
            own = Step(tool_action(name, pid), f"Delete project {pid} with its tasks, repos' records and notes")
        elif name == "delete_task":
            tid = str(args.get("task_id") or "")
            own = Step(tool_action(name, tid), f"Delete task {tid}")
        elif name == "set_task_status":
            tid, status = str(args.get("task_id") or ""), str(args.get("status") or "")
            own = Step(tool_action(name, f"{tid} {status}"), f"Force task {tid} to {status}")
        elif name == "answer_request":
            own, remembered = self._answer(args)
            extra += remembered
        elif name == "approve_task":
            extra += self._approval_merge(str(args.get("task_id") or ""))
        elif name == "restart_daemon":
            own = Step(tool_action(name),
                       "Restart the AgentQueue daemon (running agents stop, their tasks are requeued)")
        if (name == "create_agent" and args.get("agent_type") in ("command", "acp") or name == "edit_agent") \
                and _text(args, "command"):
            # A program that cannot run is refused with the tool's own message, before anyone is asked.
            self.svc.agents.require_runnable(self._agent_type(args), _text(args, "command"))
        extra += [Step(tool_action("outside_roots", folder), f"Let AgentQueue use {folder} ({why}), outside the "
                       "folders it may use without asking ([files] roots in config.toml)")
                  for folder, why in self._outside_roots(name, args)]
        # An ACP preset's name is no program of the person's: it runs a CLI AgentQueue knows (as agent_type gemini).
        preset = name in ("create_agent", "edit_agent") and self._agent_type(args) == "acp" and _is_preset(args)
        extra += [Step(tool_action("run_command", command), f"Let AgentQueue run `{command[:300]}` ({why})")
                  for command, why in self._defined_commands(name, args, preset)]
        return [own, *extra]

    def _repo(self, name: str, args: dict[str, Any], project_id: str | None) -> Any:
        if name in ("git_push", "git_merge"):
            return self.svc.repos.get(str(args.get("repo_id")))
        if not project_id:
            raise ServiceError("No project_id given and no active project for this connection. Pass project_id, "
                               "or call set_active_project (list_projects shows ids).")
        return self.svc.repos.for_project(project_id, _text(args, "repo_id"))

    def _answer(self, args: dict[str, Any]) -> tuple[Step, list[Step]]:
        """Answering an agent's request grants (or refuses) what the policy asked a person about; remembering
        the answer writes a rule into the policy, which is an edit_policy and asks like one."""
        request = self.svc.requests.get(str(args.get("request_id") or ""))
        decision = "allow" if args.get("decision") == "allow" else "deny"
        who = f"agent {request.agent_id}" if request.agent_id else "an agent"
        what = (f"{decision.capitalize()} {who}'s request {request.id} to {request.action[:300]} "
                f"(task {request.task_id})")
        if args.get("remember") is not True:
            return Step(tool_action("answer_request", f"{decision} {request.id}"), what), []
        rule = request.suggested_rule or request.action
        remember = f"add `{rule[:300]}` to the {decision} list of project {request.project_id}'s policy"
        return (Step(tool_action("answer_request", f"{decision} {request.id}"), f"{what}, and {remember}"),
                [Step(tool_action("edit_policy"),
                      f"{remember[0].upper()}{remember[1:]} (answer_request remember=true)")])

    def _approval_merge(self, task_id: str) -> list[Step]:
        """approve_task lands the task's branch: into the repo's default branch, unless a pull request carries it."""
        task = self.svc.tasks.get(task_id)
        if task.status != "AWAITING_APPROVAL" or not task.repo_id or not task.branch or task.pr_url:
            return []  # nothing merges (the tool says why when there is nothing to approve)
        repo = self.svc.repos.get(task.repo_id)
        return [Step(tool_action("merge_into_default", f"{repo.id} {task.branch}"),
                     f"Merge {task.branch} into {repo.default_branch}, the default branch of repo {repo.id} "
                     f"(approving task {task.id})")]

    def _current_branch(self, repo: Any) -> str:
        try:
            return self.svc.repos.checkout(repo).current_branch() or "HEAD"
        except Exception:  # a missing checkout: the tool reports it; the rule still sees the repo
            return "HEAD"

    def _outside_roots(self, name: str, args: dict[str, Any]) -> list[tuple[str, str]]:
        """Folders a call would let the jail open (a workspace, a linked repo) that lie outside the allowed roots."""
        wanted = []
        if name == "create_project" and _text(args, "workspace"):
            wanted.append((_text(args, "workspace") or "", "as a project's workspace"))
        if name == "add_repo" and _text(args, "path"):
            wanted.append((_text(args, "path") or "", "as a repo's checkout"))
        if name == "add_repo" and args.get("source") == "clone" and (local := local_clone_source(_text(args, "url"))):
            wanted += [(folder, "copied into the workspace by a clone") for folder in local]
        roots = [self.svc.home / "workspaces", *self.svc.settings.roots]
        found: list[tuple[str, str]] = []
        for folder, why in wanted:
            if "\0" in folder:
                continue  # the tool refuses it, naming the parameter
            real = Path(os.path.realpath(os.path.expanduser(folder)))
            inside = any(real.is_relative_to(os.path.realpath(root)) for root in roots)
            if not inside and "files.roots" not in self.svc.settings.sources:
                inside = _in_user_home(real)
            if not inside and str(real) not in (f for f, _ in found):
                found.append((str(real), why))
        return found

    def _agent_type(self, args: dict[str, Any]) -> str:
        """The type whose command a create_agent or edit_agent call sets (command or acp)."""
        kind = args.get("agent_type")
        if not kind:
            try:
                kind = self.svc.agents.get(str(args.get("agent_id") or "")).agent_type
            except Exception:  # an unknown agent: edit_agent itself says so
                kind = None
        return "acp" if kind == "acp" else "command"  # any other type: checked as a program, as before

    @staticmethod
    def _defined_commands(name: str, args: dict[str, Any], preset: bool = False) -> list[tuple[str, str]]:
        """Commands this call defines for AgentQueue to execute later (checked now, as run_command); `preset`: the
        agent's command is an ACP preset's name, not a program."""
        found: list[tuple[str, str]] = []
        if (name == "create_agent" and args.get("agent_type") in ("command", "acp") or name == "edit_agent") \
                and _text(args, "command") and not preset:
            found.append((_text(args, "command") or "", "as a command agent's program"))
        if name in ("create_hook", "edit_hook"):
            for step in args.get("context_steps") or []:
                if isinstance(step, dict) and step.get("type") == "shell" and _text(step, "command"):
                    found.append((_text(step, "command") or "", "a hook's shell step"))
            config = args.get("llm_config")
            if isinstance(config, dict) and _text(config, "command"):
                found.append((_text(config, "command") or "", "a hook's model command"))
        if name in ("create_project", "edit_project") and _text(args, "verify_command"):
            found.append((_text(args, "verify_command") or "", "a project's verify command"))
        return found

    # -- the decision ------------------------------------------------------------------------------
    def decide(self, name: str, args: dict[str, Any], active: str | None, read_only: bool) -> CallDecision:
        """The strictest verdict over the call's actions; in the readonly preset, read-only tools pass."""
        project_id = self.project_of(name, args, active)
        task_id = _text(args, "task_id")
        steps = self.steps(name, args, project_id)
        policy = self.svc.policies.effective(project_id)
        judged = [(step, policy.decide(step.action)) for step in steps]
        own_step, own = judged[0]
        if (own.decision == "deny" and own.rule is None and read_only and policy.preset.tool_allow_read_only):
            judged[0] = (own_step, Verdict("allow", own.action, "read-only tools", f"preset {policy.preset.name}"))
        step, verdict = max(judged, key=lambda pair: _STRICTNESS[pair[1].decision])
        parts = [part for part in split_action(step.action) if policy.decide(part).decision != "allow"]
        # Only rules edit_policy would take: a megabyte-long command has no rule to suggest, nor is echoed.
        suggested = tuple(rule for rule in dict.fromkeys(str(part) for part in parts or [step.action])
                          if is_rule(rule))
        return CallDecision(verdict.decision, step, verdict, project_id, task_id, verdict.decided_by, suggested)


def _is_preset(args: dict[str, Any]) -> bool:
    """Whether a create_agent/edit_agent call's command is exactly an ACP preset's name (adapters/acp_presets.py)."""
    from ..engine.adapters.acp_presets import preset_of  # noqa: PLC0415  (only for an ACP agent's command)

    return preset_of(_text(args, "command")) is not None
