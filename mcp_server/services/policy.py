"""The permission policy: the one place that decides whether an action may run, ask first, or not run.

The policy lives in `$AGENTQUEUE_HOME/policy.toml` (read with `tomllib`, re-read when it changes,
written back by `edit_policy`): a global preset and rule lists, and per-project overrides.

    preset = "standard"          # readonly | standard | autonomous
    ask_timeout = "30m"          # an unanswered agent request becomes a deny
    allow = ["Bash(npm run e2e:*)"]
    ask = []
    deny = ["Bash(rm -rf:*)"]

    [projects.web-app]
    preset = "autonomous"        # replaces the global preset for this project
    allow = ["Bash(docker compose:*)"]

Order: every deny rule (project, global, preset), then every allow rule, then every ask rule,
then the preset's default. `AGENTQUEUE_RUN_COMMAND=deny` stays as a shorthand for a deny rule on
`tool:run_command` (every command AgentQueue would execute).
"""

from __future__ import annotations

import math
import os
import posixpath
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomllib

from ..sandbox.rules import SandboxConfigError, parse_settings
from ..settings import duration_seconds
from .errors import ServiceError
from . import shell, shell_options
from .policy_rules import (
    COMMAND_TOOLS, DECISIONS, DEFAULT_PRESET, PRESETS, Action, Decision, PolicyError, Preset, Rule, matches_one,
    parse_rule, rule_matches,
)

POLICY_NAME = "policy.toml"
_STRICTNESS = {"allow": 0, "ask": 1, "deny": 2}
DEFAULT_ASK_TIMEOUT = 1800.0  # counted from the request's first notification when a notifier is configured
# With no notifier nobody is told a question is out: unless the policy sets ask_timeout, it waits this long.
UNTOLD_ASK_TIMEOUT = 86400.0
# `sandbox` is read by mcp_server/sandbox (the walls, not the questions): kept as written, checked there.
_KEYS = {"preset", "ask_timeout", "allow", "ask", "deny", "sandbox"}


class PermissionDeniedError(ServiceError):
    """The policy refuses this action."""


@dataclass(frozen=True)
class Verdict:
    decision: Decision
    action: str
    rule: str | None  # the rule that decided, None when the preset's default did
    source: str  # "project web-app" | "global" | "preset standard" | "AGENTQUEUE_RUN_COMMAND"
    reason: str | None = None  # why a default applied where a rule seemed to: `rg --pre`, a path outside

    @property
    def decided_by(self) -> str:
        base = f"rule {self.rule} ({self.source})" if self.rule else f"{self.source} default"
        return f"{base}; {self.reason}" if self.reason else base

    def refusal(self, what: str) -> str:
        """The sentence a refused caller sees: what was refused, by what, and how to allow it."""
        if self.rule:
            how = (f"remove the rule with edit_policy (remove_rule={self.rule!r})"
                   if self.source != "AGENTQUEUE_RUN_COMMAND" else "unset AGENTQUEUE_RUN_COMMAND for the daemon")
        elif self.reason and self.reason.startswith("the shell parser"):
            how = "write the command so that it can be read (no expansion in command position, no `eval \"$X\"`…) " \
                  "or pick another preset"
        elif is_rule(self.action):
            how = f"add an allow rule with edit_policy (add_rule={self.action!r}, list=allow) or pick another preset"
        else:
            how = "pick another preset"
        return f"{shell.short(what)} is denied by AgentQueue's policy ({self.decided_by}). To allow it, {how}."


@dataclass
class Scope:
    """One level of the policy file: the global table or one project's table."""

    preset: str | None = None
    ask_timeout: float | None = None
    rules: dict[Decision, list[Rule]] = field(default_factory=lambda: {d: [] for d in DECISIONS})
    sandbox: dict[str, Any] = field(default_factory=dict)  # [sandbox] as written (mcp_server/sandbox reads it)

    def to_toml(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.preset:
            out["preset"] = self.preset
        if self.ask_timeout is not None:
            out["ask_timeout"] = f"{self.ask_timeout:g}s"
        for decision in DECISIONS:
            if self.rules[decision]:
                out[decision] = [r.text for r in self.rules[decision]]
        return out


MEMO_DETAIL, MEMO_SIZE = 2000, 1024  # an EffectivePolicy keeps up to 1,024 verdicts on actions of ≤ 2,000 characters
_FOLLOWED = threading.local()  # `link`: whether the verdict being worked out in this thread looked at the filesystem


@dataclass
class EffectivePolicy:
    """What applies to one project: its preset and the rules from every level, in evaluation order."""

    preset: Preset
    ask_timeout: float
    rules: dict[Decision, list[tuple[Rule, str]]]
    ask_timeout_set: bool = False  # policy.toml sets ask_timeout (else it is DEFAULT_ASK_TIMEOUT)
    # Verdicts already worked out: the same few actions recur on every call (AgentQueue's own tools, a command
    # agent's command, the sandbox's install check), and a command's verdict walks every rule per simple command.
    _verdicts: dict[Action, Verdict] = field(default_factory=dict, repr=False, compare=False)

    def _first(self, decision: Decision, action: Action, preset: bool | None = None,
               texts: list[str] | None = None, command: shell.SimpleCommand | None = None) -> tuple[Rule, str] | None:
        """The first rule of `decision` matching `action` (or any of `texts`, a simple command's spellings;
        a deny or ask also `command` with its options spelled otherwise); `preset` True/False keeps only the
        preset's rules / only the person's."""
        for rule, source in self.rules[decision]:
            if preset is not None and source.startswith("preset ") != preset:
                continue
            if texts is None and rule_matches(rule, action, decision):
                return rule, source
            if texts is not None and any(matches_one(rule, Action(action.tool, t, action.root)) for t in texts):
                return rule, source
            if command is not None and decision != "allow" and rule.spec and rule.covers_tool(action.tool) \
                    and shell_options.has_options(rule.spec, command.words):
                return rule, source
        return None

    def _default(self, action: Action, shown: str, reason: str | None = None) -> Verdict:
        default = self.preset.tool_default if action.tool.startswith("tool:") else self.preset.agent_default
        return Verdict(default, shown, None, f"preset {self.preset.name}", reason)

    def _ordered(self, action: Action, shown: str, texts: list[str] | None = None) -> Verdict:
        """deny → the person's allow → the person's ask → the preset's allow → the preset's ask → default."""
        if hit := self._first("deny", action, None, texts):
            return Verdict("deny", shown, hit[0].text, hit[1])
        order: tuple[tuple[Decision, bool], ...] = (("allow", False), ("ask", False), ("allow", True), ("ask", True))
        for decision, preset in order:
            if hit := self._first(decision, action, preset, texts):
                return Verdict(decision, shown, hit[0].text, hit[1])
        return self._default(action, shown)

    def _escalate(self, action: Action, shown: str, reason: str) -> Verdict:
        """What a preset allow does not cover, or the parser cannot account for: never a prefix allow; the
        preset's escalation (ask in standard, deny in readonly), and ask even in autonomous when a deny
        rule might be hidden in it."""
        decision = self.preset.escalate
        if decision == "allow" and self.rules["deny"]:
            decision = "ask"
        return Verdict(decision, shown, None, f"preset {self.preset.name}", reason)

    def decide(self, action: Action) -> Verdict:
        """A command is judged simple command by simple command (and each redirection as a write); the
        strictest verdict wins. Any other action goes through the rule order once."""
        # Not kept: long details (a caller's varied text would only fill memory), and a verdict that followed a
        # symlink (the link may move before the same action comes again).
        kept = len(action.argument or "") <= MEMO_DETAIL
        if kept and (verdict := self._verdicts.get(action)) is not None:
            return verdict
        _FOLLOWED.link = False
        if action.tool in COMMAND_TOOLS and action.argument and action.argument.strip():
            verdict = self._decide_command(action)
        else:
            verdict = self._ordered(action, str(action))
        if kept and not _FOLLOWED.link and len(self._verdicts) < MEMO_SIZE:
            self._verdicts[action] = verdict
        return verdict

    def _decide_command(self, action: Action) -> Verdict:
        whole = shell.shown(str(action))
        analysis = shell.analyse(action.argument or "")
        if hit := self._first("deny", action):  # the whole text too: a deny still applies to what cannot be parsed
            return Verdict("deny", whole, hit[0].text, hit[1])
        bare = next(((r, s) for r, s in self.rules["allow"] if r.spec is None and not s.startswith("preset ")
                     and r.covers_tool(action.tool) and matches_one(r, action)), None)
        verdicts: list[Verdict] = []
        if len(analysis.commands) > shell.MAX_COMMANDS:  # too many to judge one by one: deny rules, then ask
            for command in analysis.commands:
                if hit := self._first("deny", action, None, command.spellings(), command):
                    return Verdict("deny", shell.shown(str(Action(action.tool, command.text))), hit[0].text, hit[1])
            return self._escalate(action, whole, f"the shell parser: {analysis.problems[-1]}")
        for command in analysis.commands:
            verdict = self._judge_simple(action, command)
            if verdict.decision == "deny":
                return verdict
            verdicts.append(verdict)
        for access in analysis.accesses:
            verdict = self._judge_access(action, access.kind, access.path, access.cwds, shell.short(str(action), 120))
            if verdict.decision == "deny" and (verdict.rule or not bare):
                return verdict
            verdicts.append(verdict)
        if bare and not (analysis.problems and self.rules["deny"]):
            return Verdict("allow", whole, bare[0].text, bare[1])
        verdicts += [self._escalate(action, whole, f"the shell parser: {p}") for p in analysis.problems]
        if not verdicts:
            return self._ordered(action, whole)
        # among equally strict verdicts the one that says why (an option, a path, the parser) is the one shown
        strictest = max(verdicts, key=lambda v: (_STRICTNESS[v.decision], v.reason is not None))
        if strictest.decision == "allow":  # named after the last command's rule (the redirections' come after)
            last = verdicts[len(analysis.commands) - 1] if analysis.commands else verdicts[-1]
            return Verdict("allow", whole, last.rule, last.source, last.reason)
        return strictest

    def _judge_simple(self, action: Action, command: shell.SimpleCommand) -> Verdict:
        part = Action(action.tool, command.text, action.root)
        shown = shell.shown(str(part))
        spellings = command.spellings()
        if hit := self._first("deny", part, None, spellings, command):
            return Verdict("deny", shown, hit[0].text, hit[1])
        named = [(kind, path) for kind, path in shell_options.paths(command)] if action.tool in COMMAND_TOOLS else []
        judged_paths = [self._judge_access(action, kind, path, command.cwds, shown) for kind, path in named]
        if denied := next((v for v in judged_paths if v.decision == "deny" and v.rule), None):
            return denied  # a person's deny on a path (`Read(~/.ssh/**)`) holds whatever allows the command
        if hit := self._first("allow", part, False, [command.text]):
            return Verdict("allow", shown, hit[0].text, hit[1])
        if hit := self._first("ask", part, False, spellings, command):
            return Verdict("ask", shown, hit[0].text, hit[1])
        if hit := self._first("allow", part, True, [command.text]):
            if risks := shell_options.risks(command):
                return self._escalate(part, shown, f"{hit[0].text} does not cover {', '.join(risks[:3])}")
            if judged_paths:
                worst = max(judged_paths, key=lambda v: _STRICTNESS[v.decision])
                if worst.decision != "allow":
                    return worst
            return Verdict("allow", shown, hit[0].text, hit[1])
        if hit := self._first("ask", part, True, spellings, command):
            return Verdict("ask", shown, hit[0].text, hit[1])
        return self._default(part, shown)

    def _judge_access(self, action: Action, kind: str, path: str | None, cwds: tuple[str | None, ...],
                      shown: str) -> Verdict:
        """A file a command reads or writes, judged like Read(<path>) / Write(<path>) against the worktree."""
        what = "writes" if kind == "write" else "reads"
        if path is None:
            return self._escalate(action, shown, f"it {what} a file named by an expansion")
        if path in ("-", "") or path in shell.NOT_FILES:
            return Verdict("allow", shown, None, "shell", None)
        targets = _resolve(path, cwds, action.root)
        if targets is None:
            return self._escalate(action, shown, f"it {what} {shell.short(path, 80)}, which cannot be placed")
        if action.tool.startswith("tool:") or action.root is None:
            # AgentQueue's own run_command has no worktree: a path it cannot place inside one asks.
            outside = [t for t in targets if t.startswith("/")]
            return (self._escalate(action, shown, f"it {what} {shell.short(outside[0], 80)}") if outside
                    else Verdict("allow", shown, None, "shell", None))
        verdicts = [self._ordered(Action("Write" if kind == "write" else "Read", target, action.root),
                                  shell.shown(f"{'Write' if kind == 'write' else 'Read'}({target})"))
                    for target in targets]
        worst = max(verdicts, key=lambda v: _STRICTNESS[v.decision])
        if worst.decision != "allow" and worst.reason is None:
            return Verdict(worst.decision, worst.action, worst.rule, worst.source,
                           f"`{shell.short(action.argument or '', 80)}` {what} {shell.short(targets[0], 80)}")
        return worst

    def denies_outright(self, tool: str, read_only: bool) -> bool:
        """Whether every call of AgentQueue's tool `tool` is denied, whatever its detail: a bare deny rule,
        or a deny default that no allow or ask rule for the tool lifts (such tools are left out of tools/list)."""
        name = f"tool:{tool}"
        if any(r.tool in (name, "tool:*") and r.spec is None for r, _ in self.rules["deny"]):
            return True
        if self.preset.tool_default != "deny" or read_only and self.preset.tool_allow_read_only:
            return False
        return not any(r.tool in (name, "tool:*") for d in ("allow", "ask") for r, _ in self.rules[d])

    def describe(self) -> dict[str, Any]:
        return {"preset": self.preset.name, "summary": self.preset.summary, "ask_timeout_seconds": self.ask_timeout,
                "agent_default": self.preset.agent_default, "tool_default": self.preset.tool_default,
                **{d: [{"rule": r.text, "source": s} for r, s in self.rules[d]] for d in DECISIONS}}


def parse_duration(value: Any, where: str) -> float:
    if isinstance(value, bool):
        raise PolicyError(f"{where} = {value!r} is not a duration: give seconds or e.g. \"30m\".")
    seconds = duration_seconds(value)
    if seconds is None:
        raise PolicyError(f"{where} = {value!r} is not a duration: give seconds or e.g. \"30m\", \"2h\".")
    if not math.isfinite(seconds) or seconds < 1:
        raise PolicyError(f"{where} = {value!r} must be at least one second.")
    return seconds


def _scope(data: dict[str, Any], where: str) -> Scope:
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise PolicyError(f"{where}: unknown key(s) {', '.join(unknown)}. Known: {', '.join(sorted(_KEYS))}.")
    scope = Scope()
    if "preset" in data:
        if data["preset"] not in PRESETS:
            raise PolicyError(f"{where}: preset {data['preset']!r} is not one of {', '.join(PRESETS)}.")
        scope.preset = data["preset"]
    if "ask_timeout" in data:
        scope.ask_timeout = parse_duration(data["ask_timeout"], f"{where} ask_timeout")
    for decision in DECISIONS:
        items = data.get(decision, [])
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            raise PolicyError(f"{where}: `{decision}` must be a list of rules (strings).")
        try:
            scope.rules[decision] = [parse_rule(i) for i in items]
        except PolicyError as error:
            raise PolicyError(f"{where}: {error}") from None
    if "sandbox" in data:
        try:
            parse_settings(data["sandbox"], f"{where} [sandbox]")
        except SandboxConfigError as error:
            raise PolicyError(str(error)) from None
        scope.sandbox = dict(data["sandbox"])
    return scope


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _render_table(table: dict[str, Any]) -> list[str]:
    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        return "[" + ", ".join(_quote(str(i)) for i in v) + "]" if isinstance(v, list) else _quote(str(v))
    return [f"{key} = {value(v)}" for key, v in table.items()]


def _render(scope: Scope) -> list[str]:
    lines = []
    for key, value in scope.to_toml().items():
        rendered = "[" + ", ".join(_quote(v) for v in value) + "]" if isinstance(value, list) else _quote(value)
        lines.append(f"{key} = {rendered}")
    return lines


class Policies:
    """Reads and writes policy.toml; answers `decide(action, project_id)`."""

    def __init__(self, home: Path) -> None:
        self.path = home / POLICY_NAME
        self._lock = threading.RLock()
        self._cache: tuple[float, int, tuple[Scope, dict[str, Scope]]] | None = None
        # Every tool call asks `effective` (~170 preset rules walked per decision): kept per project until the
        # file is read again or written; `_generation` counts those, so a policy built from an old file is not kept.
        self._generation = 0
        self._effective: dict[tuple[str | None, str], EffectivePolicy] = {}

    # -- the file ---------------------------------------------------------------------------------
    def _load(self) -> tuple[Scope, dict[str, Scope]]:
        with self._lock:
            try:
                stat = self.path.stat()
            except FileNotFoundError:
                if self._cache is not None:  # the file was there: what was kept came from it
                    self._forget()
                return Scope(), {}
            if self._cache and self._cache[:2] == (stat.st_mtime, stat.st_size):
                return self._cache[2]
            self._forget()
            try:
                data = tomllib.loads(self.path.read_text(encoding="utf-8"))
            except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
                what = "UTF-8 text" if isinstance(error, UnicodeDecodeError) else "valid TOML"
                raise PolicyError(f"{self.path} is not {what} ({shell.short(str(error), 120)}); fix it or move it "
                                  "aside (without it the standard preset applies).") from None
            except OSError as error:
                raise PolicyError(f"{self.path} cannot be read ({error.strerror or error}); fix its permissions or "
                                  "move it aside (without it the standard preset applies).") from None
            projects_raw = data.pop("projects", {})
            if not isinstance(projects_raw, dict):
                raise PolicyError(f"{self.path}: `projects` must be a table of [projects.<id>] tables.")
            loaded = (_scope(data, str(self.path)),
                      {pid: _scope(table, f"{self.path} [projects.{pid}]") for pid, table in projects_raw.items()})
            self._cache = (stat.st_mtime, stat.st_size, loaded)
            return loaded

    def _save(self, global_scope: Scope, projects: dict[str, Scope]) -> None:
        lines = ["# AgentQueue permission policy (see docs/design.md, Permissions). Rewritten by edit_policy.",
                 *_render(global_scope)]
        if global_scope.sandbox:
            lines += ["", "[sandbox]", *_render_table(global_scope.sandbox)]
        for pid in sorted(projects):
            body = _render(projects[pid])
            name = _quote(pid) if not re.fullmatch(r'[A-Za-z0-9_-]+', pid) else pid
            if body or projects[pid].sandbox:
                lines += ["", f"[projects.{name}]", *body]
            if projects[pid].sandbox:
                lines += ["", f"[projects.{name}.sandbox]", *_render_table(projects[pid].sandbox)]
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
        os.chmod(tmp, 0o600)
        os.replace(tmp, self.path)
        with self._lock:
            self._forget()

    def _forget(self) -> None:
        """The file changed (or is gone, or was written): nothing read from it before is kept."""
        self._cache = None
        self._generation += 1
        self._effective = {}

    # -- reading ----------------------------------------------------------------------------------
    def effective(self, project_id: str | None = None) -> EffectivePolicy:
        key = (project_id, os.environ.get("AGENTQUEUE_RUN_COMMAND", ""))
        with self._lock:
            global_scope, projects = self._load()
            generation = self._generation
            if (kept := self._effective.get(key)) is not None:
                return kept
        policy = self._build(global_scope, projects, project_id)
        with self._lock:
            if self._generation == generation:
                self._effective[key] = policy
        return policy

    def _build(self, global_scope: Scope, projects: dict[str, Scope], project_id: str | None) -> EffectivePolicy:
        project = projects.get(project_id) if project_id else None
        preset_name = (project.preset if project and project.preset else global_scope.preset) or DEFAULT_PRESET
        preset = PRESETS[preset_name]
        timeout = next((s.ask_timeout for s in (project, global_scope) if s and s.ask_timeout), DEFAULT_ASK_TIMEOUT)
        rules: dict[Decision, list[tuple[Rule, str]]] = {d: [] for d in DECISIONS}
        if os.environ.get("AGENTQUEUE_RUN_COMMAND", "").strip().lower() == "deny":
            rules["deny"].append((parse_rule("tool:run_command"), "AGENTQUEUE_RUN_COMMAND"))
        for scope, source in ((project, f"project {project_id}"), (global_scope, "global")):
            if scope:
                for decision in DECISIONS:
                    rules[decision] += [(r, source) for r in scope.rules[decision]]
        for decision in DECISIONS:
            rules[decision] += [(parse_rule(r), f"preset {preset.name}") for r in getattr(preset, decision)]
        timeout_set = any(s is not None and s.ask_timeout for s in (project, global_scope))
        return EffectivePolicy(preset, timeout, rules, timeout_set)

    def decide(self, action: Action, project_id: str | None = None) -> Verdict:
        return self.effective(project_id).decide(action)

    def require(self, action: Action, project_id: str | None, what: str) -> Verdict:
        """For actions no person can be asked about now: a deny raises; allow and ask return the verdict."""
        verdict = self.decide(action, project_id)
        if verdict.decision == "deny":
            raise PermissionDeniedError(verdict.refusal(what))
        return verdict

    # -- changing ---------------------------------------------------------------------------------
    def edit(self, project_id: str | None = None, preset: str | None = None, add_rule: str | None = None,
             remove_rule: str | None = None, rule_list: Decision = "allow",
             ask_timeout: str | float | None = None) -> EffectivePolicy:
        """Change the global policy, or one project's override; returns what now applies there."""
        with self._lock:
            global_scope, projects = self._load()
            global_scope, projects = _copy(global_scope), {k: _copy(v) for k, v in projects.items()}
            scope = projects.setdefault(project_id, Scope()) if project_id else global_scope
            if preset is not None:
                if preset == "" and project_id:
                    scope.preset = None  # back to the global preset
                elif preset not in PRESETS:
                    raise PolicyError(f"preset {preset!r} is not one of {', '.join(PRESETS)}"
                                      + (" (\"\" clears a project's own preset)." if project_id else "."))
                else:
                    scope.preset = preset
            if ask_timeout is not None:
                scope.ask_timeout = parse_duration(ask_timeout, "ask_timeout")
            if rule_list not in DECISIONS:
                raise PolicyError(f"list must be one of {', '.join(DECISIONS)}.")
            if add_rule is not None:
                rule = parse_rule(add_rule)
                if rule.text not in [r.text for r in scope.rules[rule_list]]:
                    scope.rules[rule_list].append(rule)
            if remove_rule is not None:
                texts = {d: [r.text for r in scope.rules[d]] for d in DECISIONS}
                found = [d for d in DECISIONS if remove_rule.strip() in texts[d]]
                if not found:
                    where = f"project {project_id}" if project_id else "the global policy"
                    raise PolicyError(f"{where} has no rule {remove_rule.strip()!r}; get_policy lists the rules "
                                      "(preset rules cannot be removed: choose another preset instead).")
                for decision in found:
                    scope.rules[decision] = [r for r in scope.rules[decision] if r.text != remove_rule.strip()]
            if preset is None and add_rule is None and remove_rule is None and ask_timeout is None:
                raise PolicyError("Nothing to change: give preset, add_rule, remove_rule or ask_timeout.")
            self._save(global_scope, projects)
        return self.effective(project_id)


def is_rule(text: str) -> bool:
    """Whether `text` is a rule edit_policy would accept (suggestions offer only such rules)."""
    try:
        parse_rule(text)
    except PolicyError:
        return False
    return True


def _resolve(path: str, cwds: tuple[str | None, ...], root: str | None) -> list[str] | None:
    """Where `path` may point: `~` is the home, a relative path resolves against each place the command
    may run in (the worktree, or where a `cd` went); `..` is folded. None when that cannot be known."""
    if path.startswith("~"):
        if path != "~" and not path.startswith("~/"):
            return None  # `~user`
        path = str(Path.home()) + path[1:]
    if path.startswith("/"):
        return _followed([posixpath.normpath(path)])
    out = []
    for cwd in cwds:
        if cwd is None:
            return None
        if cwd.startswith("~"):
            cwd = str(Path.home()) + cwd[1:]
        base = cwd if cwd.startswith("/") else posixpath.join(root or "", cwd)
        joined = posixpath.join(base, path)
        if not joined.startswith("/"):  # no worktree: keep it relative, but `..` out of it is outside
            joined = posixpath.normpath(joined)
            out.append("/.." if joined == ".." or joined.startswith("../") else joined)
        else:
            out.append(posixpath.normpath(joined))
    return _followed(out)


def _followed(targets: list[str]) -> list[str]:
    """The targets and, for each that is (or passes through) a symlink, where it really leads: a link
    committed in the worktree must not make a file outside it look inside."""
    out = []
    for target in targets:
        out.append(target)
        if target.startswith("/"):
            _FOLLOWED.link = True
            real = os.path.realpath(target)
            if real != target:
                out.append(real)
    return list(dict.fromkeys(out))


def _copy(scope: Scope) -> Scope:
    return Scope(scope.preset, scope.ask_timeout, {d: list(scope.rules[d]) for d in DECISIONS}, dict(scope.sandbox))
