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
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomllib

from ..sandbox.rules import SandboxConfigError, parse_settings
from ..settings import duration_seconds
from .errors import ServiceError
from .policy_rules import (
    DECISIONS, DEFAULT_PRESET, PRESETS, Action, Decision, PolicyError, Preset, Rule, parse_rule, rule_matches, split_action,
)

POLICY_NAME = "policy.toml"
DEFAULT_ASK_TIMEOUT = 1800.0
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

    @property
    def decided_by(self) -> str:
        return f"rule {self.rule} ({self.source})" if self.rule else f"{self.source} default"

    def refusal(self, what: str) -> str:
        """The sentence a refused caller sees: what was refused, by what, and how to allow it."""
        if self.rule:
            how = (f"remove the rule with edit_policy (remove_rule={self.rule!r})" if self.source != "AGENTQUEUE_RUN_COMMAND"
                   else "unset AGENTQUEUE_RUN_COMMAND for the daemon")
        else:
            how = f"add an allow rule with edit_policy (add_rule={self.action!r}, list=allow) or pick another preset"
        return f"{what} is denied by AgentQueue's policy ({self.decided_by}). To allow it, {how}."


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


@dataclass
class EffectivePolicy:
    """What applies to one project: its preset and the rules from every level, in evaluation order."""

    preset: Preset
    ask_timeout: float
    rules: dict[Decision, list[tuple[Rule, str]]]

    def _first(self, decision: Decision, action: Action) -> tuple[Rule, str] | None:
        return next(((r, s) for r, s in self.rules[decision] if rule_matches(r, action, decision)), None)

    def decide(self, action: Action) -> Verdict:
        """deny → allow → ask → the preset's default; a compound command is judged part by part."""
        parts = split_action(action)
        whole = str(action)
        for part in parts:  # a deny on any part denies the whole
            if hit := self._first("deny", part):
                return Verdict("deny", whole, hit[0].text, hit[1])
        if (bare := self._first("allow", action)) and bare[0].spec is None:
            return Verdict("allow", whole, bare[0].text, bare[1])
        allowed = [self._first("allow", part) for part in parts]
        if all(allowed):
            rule, source = allowed[-1]  # type: ignore[misc]
            return Verdict("allow", whole, rule.text, source)
        for part in parts:  # an ask on any part not already allowed asks
            if hit := self._first("ask", part):
                return Verdict("ask", whole, hit[0].text, hit[1])
        default = self.preset.tool_default if action.tool.startswith("tool:") else self.preset.agent_default
        return Verdict(default, whole, None, f"preset {self.preset.name}")

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
        scope.rules[decision] = [parse_rule(i) for i in items]
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

    # -- the file ---------------------------------------------------------------------------------
    def _load(self) -> tuple[Scope, dict[str, Scope]]:
        with self._lock:
            try:
                stat = self.path.stat()
            except FileNotFoundError:
                return Scope(), {}
            if self._cache and self._cache[:2] == (stat.st_mtime, stat.st_size):
                return self._cache[2]
            try:
                data = tomllib.loads(self.path.read_text(encoding="utf-8"))
            except tomllib.TOMLDecodeError as error:
                raise PolicyError(f"{self.path} is not valid TOML ({error}); fix it or move it aside "
                                  "(without it the standard preset applies).") from None
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
        self._cache = None

    # -- reading ----------------------------------------------------------------------------------
    def effective(self, project_id: str | None = None) -> EffectivePolicy:
        global_scope, projects = self._load()
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
        return EffectivePolicy(preset, timeout, rules)

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


def _copy(scope: Scope) -> Scope:
    return Scope(scope.preset, scope.ask_timeout, {d: list(scope.rules[d]) for d in DECISIONS}, dict(scope.sandbox))
