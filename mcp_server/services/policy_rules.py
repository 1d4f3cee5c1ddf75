"""Permission rules: how an action string is built, how a rule matches it, and the presets.

Agent actions use Claude Code's own rule syntax, so users can paste rules they already have:
`Bash(npm test:*)` (a command and anything after it), `Bash(git * main)` (`*` matches anything),
`Edit(src/**)` (a path glob, relative to the task's worktree; `./**` is the whole worktree, an
absolute glob is absolute), `Read`, `WebFetch(domain:example.com)`, `mcp__server__tool`,
`mcp__server` (all its tools). Actions on AgentQueue's own MCP tools are `tool:<name>` with a
detail where it matters: `tool:run_command:<command>` (matched like a Bash command),
`tool:git_push:<repo> <branch>`, `tool:delete_project:<id>` (globs). A bare `Bash` or
`tool:run_command` rule matches every use.

A command is parsed as a shell would (`services/shell.py`) and judged simple command by simple
command: a deny or ask on any of them counts, an allow must cover every one, redirections are
writes to their targets, and what the parser cannot account for is never allowed by a prefix rule.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Literal
from urllib.parse import urlparse

from . import shell
from .errors import InvalidInputError

Decision = Literal["allow", "ask", "deny"]
DECISIONS: tuple[Decision, ...] = ("allow", "ask", "deny")

# Tools whose argument is a command, a path or a domain, and where in their input it lives.
COMMAND_TOOLS = {"Bash": "command", "tool:run_command": "command"}
PATH_TOOLS = {"Edit": "file_path", "Write": "file_path", "MultiEdit": "file_path", "Read": "file_path",
              "NotebookEdit": "notebook_path", "NotebookRead": "notebook_path", "Glob": "path", "Grep": "path",
              "LS": "path"}
# A rule on Edit covers every tool that changes a file, as in Claude Code.
EDIT_FAMILY = {"Edit", "Write", "MultiEdit", "NotebookEdit"}
READ_FAMILY = {"Read", "Glob", "Grep", "LS", "NotebookRead"}
_RULE = re.compile(r"\A(?P<tool>[A-Za-z][\w-]*)(?:\((?P<spec>.*)\))?\Z", re.S)
# Control characters (tab aside), DEL, C1 and the bidirectional overrides: none belongs in a rule,
# and each could corrupt policy.toml or hide what a rule says from the person reading it.
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
MAX_RULE_CHARS = 1_000


class PolicyError(InvalidInputError):
    """A rule or policy setting that cannot be used; the message says how to write it."""


@dataclass(frozen=True)
class Action:
    """What is about to happen: a tool and its argument (a command, a path, a domain, a detail)."""

    tool: str
    argument: str | None = None
    root: str | None = None  # the task's worktree, for relative path rules and "outside the worktree"

    def __str__(self) -> str:
        if self.argument is None:
            return self.tool
        if self.tool.startswith("tool:"):
            return f"{self.tool}:{self.argument}"
        return f"{self.tool}({self.argument})"


@dataclass(frozen=True)
class Rule:
    text: str
    tool: str
    spec: str | None = None

    def covers_tool(self, tool: str) -> bool:
        if self.tool == tool:
            return True
        if self.tool == "Edit" and tool in EDIT_FAMILY or self.tool == "Read" and tool in READ_FAMILY:
            return True
        # mcp__server covers mcp__server__tool; mcp__server__* as well.
        return self.tool.startswith("mcp__") and tool.startswith(self.tool.rstrip("*").rstrip("_") + "__")


def parse_rule(text: str) -> Rule:
    """`Bash(npm test:*)`, `Edit(src/**)`, `mcp__github`, `tool:run_command:pytest:*`, `tool:delete_project`."""
    # Each run's start reads the policy several times over (hundreds of rules); a Rule is immutable, so it is
    # parsed once per text. Only text is remembered (anything else gets the error, uncached).
    return _parse_text(text) if isinstance(text, str) else _parse_rule(text)


def _parse_rule(text: str) -> Rule:
    raw = text.strip() if isinstance(text, str) else ""
    if len(raw) > MAX_RULE_CHARS:
        raise PolicyError(f"A rule is {len(raw):,} characters long; at most {MAX_RULE_CHARS:,} are accepted. "
                          "Write a shorter pattern, e.g. `Bash(npm run e2e:*)`.")
    if bad := _CONTROL.search(raw):
        raise PolicyError(f"Rule {shell.short(raw, 80)!r} contains the control character U+{ord(bad[0]):04X}; a rule "
                          "is one line of printable text. Remove it and add the rule again.")
    if not raw:
        raise PolicyError("A rule is empty. Write e.g. `Bash(npm test:*)`, `Edit(src/**)` or `tool:git_push`.")
    if raw.startswith("tool:"):
        name, _, spec = raw[5:].partition(":")
        if not re.fullmatch(r"[a-z_][a-z0-9_]*|\*", name):
            raise PolicyError(f"Rule {raw!r}: `tool:` must be followed by an AgentQueue tool name, e.g. "
                              "`tool:run_command:pytest:*` or `tool:delete_project`.")
        return Rule(raw, f"tool:{name}", spec or None)
    match = _RULE.match(raw)
    if not match:
        raise PolicyError(f"Rule {raw!r} is not of the form Tool or Tool(specifier), e.g. `Bash(npm test:*)`, "
                          "`Edit(src/**)`, `WebFetch(domain:example.com)` or `mcp__server__tool`.")
    spec = match["spec"]
    if spec is not None and not spec.strip():
        raise PolicyError(f"Rule {raw!r} has empty parentheses: write `{match['tool']}` to match every use.")
    if match["tool"] == "WebFetch" and spec and not spec.startswith("domain:"):
        raise PolicyError(f"Rule {raw!r}: WebFetch rules name a domain, e.g. `WebFetch(domain:example.com)`.")
    return Rule(raw, match["tool"], spec.strip() if spec else None)


# -- building actions ----------------------------------------------------------------------------------
def agent_action(tool_name: str, tool_input: dict[str, Any] | None, root: Path | None) -> Action:
    """The action an agent's tool call amounts to (Claude Code tool names)."""
    data = tool_input or {}
    where = str(root) if root else None
    if tool_name in COMMAND_TOOLS:
        return Action(tool_name, str(data.get(COMMAND_TOOLS[tool_name], "")), where)
    if tool_name in PATH_TOOLS:
        path = data.get(PATH_TOOLS[tool_name]) or (where if tool_name in ("Glob", "Grep", "LS") else None)
        return Action(tool_name, str(path) if path else None, where)
    if tool_name == "WebFetch":
        host = urlparse(str(data.get("url", ""))).hostname
        return Action(tool_name, f"domain:{host}" if host else None, where)
    return Action(tool_name, None, where)


def tool_action(name: str, detail: str | None = None) -> Action:
    """The action a call of one of AgentQueue's own MCP tools amounts to."""
    return Action(f"tool:{name}", detail)


# -- matching ---------------------------------------------------------------------------------------------
def command_parts(command: str) -> list[str]:
    """`a && b; c | $(d)` -> [a, b, c, d]: every simple command bash would run, unquoted and unwrapped;
    the whole command when the parser cannot account for all of it."""
    analysis = shell.analyse(command)
    if analysis.problems or not analysis.commands:
        return [command.strip()] if command.strip() else []
    return list(dict.fromkeys(c.text for c in analysis.commands))


def split_action(action: Action) -> list[Action]:
    """A command action as one action per simple command; any other action as itself."""
    if action.tool not in COMMAND_TOOLS or not action.argument:
        return [action]
    return [Action(action.tool, part, action.root) for part in command_parts(action.argument)] or [action]


def _command_matches(spec: str, command: str) -> bool:
    command = command.strip()
    if spec.endswith(":*"):  # the legacy prefix form: the words, then nothing or a space and anything
        prefix = spec[:-2].rstrip()
        return command == prefix or command.startswith(prefix + " ")
    if "*" in spec:
        pattern = re.escape(spec).replace(r"\*", ".*")
        if spec.endswith(" *") and spec.count("*") == 1:  # `ls *` also matches a bare `ls`
            pattern = pattern[: -len(r"\ .*")] + r"(?: .*)?"
        return re.fullmatch(pattern, command, re.S) is not None
    return command == spec


def _inside(path: Path, root: str | None) -> bool:
    return root is not None and (path == Path(root) or path.is_relative_to(root))


def _path_matches(spec: str, argument: str, root: str | None) -> bool:
    target = Path(argument)
    if not target.is_absolute():
        if root is None:
            return False
        target = Path(root) / target
    target = Path(*[p for p in target.parts])  # normalised, without resolving symlinks (done by the caller)
    pattern = spec
    if pattern.startswith("~/"):
        pattern = str(Path.home() / pattern[2:])
    elif not pattern.startswith("/"):
        if root is None:
            return False
        pattern = str(Path(root) / pattern.removeprefix("./"))
    if pattern.endswith("/**"):
        base = pattern[:-3]
        return target == Path(base) or target.is_relative_to(base)
    return PurePosixPath(str(target)).match(pattern) or fnmatch.fnmatchcase(str(target), pattern)


def rule_matches(rule: Rule, action: Action, decision: Decision) -> bool:
    """Whether `rule` applies to `action`. A command is parsed: an allow must cover every simple command
    in it (and nothing the parser cannot account for, unless the rule is bare); a deny or ask applies
    when it matches any simple command, in any spelling (`/bin/rm`, `'rm'`, `\\rm`, `env rm`, `xargs rm`)."""
    if action.tool in COMMAND_TOOLS and rule.spec is not None and action.argument and rule.covers_tool(action.tool):
        analysis = shell.analyse(action.argument)
        if decision == "allow":
            return not analysis.problems and bool(analysis.commands) and all(
                matches_one(rule, Action(action.tool, c.text, action.root)) for c in analysis.commands)
        return matches_one(rule, action) or any(
            matches_one(rule, Action(action.tool, text, action.root))
            for c in analysis.commands for text in c.spellings())
    return matches_one(rule, action)


def matches_one(rule: Rule, action: Action) -> bool:
    """Whether `rule` matches `action` as it stands (for commands: one simple command's text)."""
    if action.tool.startswith("tool:") != rule.tool.startswith("tool:"):
        return False
    if rule.tool == "tool:*":
        return rule.spec is None or fnmatch.fnmatchcase(str(action), f"tool:*:{rule.spec}")
    if not rule.covers_tool(action.tool):
        return False
    if rule.spec is None:
        return True
    if action.argument is None:
        return False
    if action.tool in COMMAND_TOOLS:
        return _command_matches(rule.spec, action.argument)
    if action.tool in PATH_TOOLS:
        return _path_matches(rule.spec, action.argument, action.root)
    if action.tool == "WebFetch":
        want = rule.spec.removeprefix("domain:")
        have = action.argument.removeprefix("domain:")
        return have == want or want.startswith("*.") and have.endswith(want[1:])
    return fnmatch.fnmatchcase(action.argument, rule.spec)


def outside_root(action: Action) -> bool:
    """A path action that reaches outside the task's worktree (presets ask about those)."""
    if action.tool not in PATH_TOOLS or action.argument is None or action.root is None:
        return False
    target = Path(action.argument)
    return target.is_absolute() and not _inside(target, action.root)


# -- presets ---------------------------------------------------------------------------------------------
# What tests, builds, linters and git reads look like: allowed without asking in `standard`.
SAFE_COMMANDS = [
    "ls", "pwd", "cat", "head", "tail", "wc", "echo", "grep", "rg", "diff", "sort", "uniq", "which", "mkdir",
    "true", "test", "find",
    "git status", "git diff", "git log", "git show", "git branch", "git rev-parse", "git ls-files", "git blame",
    "git add", "git commit", "git stash", "git switch", "git checkout", "git restore", "git merge-base",
    "npm test", "npm run test", "npm run build", "npm run lint", "npm run typecheck", "npm run format",
    "npx tsc", "npx eslint", "npx prettier", "npx vitest", "npx jest", "yarn test", "yarn build", "yarn lint",
    "pnpm test", "pnpm build", "pnpm lint", "tsc", "eslint", "prettier",
    "pytest", "python -m pytest", "python3 -m pytest", "ruff", "mypy", "black", "flake8", "python -m unittest",
    "go test", "go build", "go vet", "gofmt", "cargo test", "cargo build", "cargo check", "cargo clippy",
    "cargo fmt", "make test", "make build", "make check", "make lint", "mvn test", "gradle test",
    "./gradlew test", "dotnet test", "dotnet build",
]
# What reaches the network, installs packages, publishes or acts outside the worktree: asked about.
ASK_COMMANDS = [
    "curl", "wget", "ssh", "scp", "rsync", "git push", "git pull", "git fetch", "git clone", "gh",
    "npm install", "npm i", "npm ci", "npm publish", "npx", "yarn add", "pnpm add", "pip install", "pip3 install",
    "python -m pip", "python3 -m pip", "uv add", "uv pip install", "poetry add", "cargo install", "go get",
    "go install", "gem install", "apt", "apt-get", "brew", "sudo", "docker", "rm -rf",
]
# AgentQueue's own tools that change shared state beyond the queue: asked about in `standard` (an allow answer to
# an agent's request grants what the policy asked a person about, so it asks too; a deny answer does not).
RISKY_TOOLS = ["run_command", "git_push", "push_branch", "merge_into_default", "delete_project", "restart_daemon",
               "edit_policy", "outside_roots", "answer_request:allow *"]
EDIT_TOOLS = ["Edit", "Write", "MultiEdit", "NotebookEdit"]


@dataclass(frozen=True)
class Preset:
    name: str
    summary: str
    agent_default: Decision  # an agent action no rule settles
    tool_default: Decision  # a call of an AgentQueue tool no rule settles
    # What a command gets when a preset allow matches its words but not what it does (an option that
    # writes or runs, a path outside the worktree), or when the shell parser cannot account for it.
    escalate: Decision = "ask"
    allow: list[str] = field(default_factory=list)
    ask: list[str] = field(default_factory=list)
    deny: list[str] = field(default_factory=list)
    # AgentQueue tools a read-only client keeps (tools annotated read-only); set by the server.
    tool_allow_read_only: bool = False


PRESETS: dict[str, Preset] = {
    "readonly": Preset(
        "readonly", "agents read and run read-only commands; nothing is edited, executed or published",
        agent_default="deny", tool_default="deny", tool_allow_read_only=True, escalate="deny",
        allow=["Read(./**)", "Glob", "Grep", "LS", "TodoWrite",
               *[f"Bash({c}:*)" for c in ("ls", "pwd", "cat", "head", "tail", "wc", "echo", "grep", "rg", "diff",
                                          "find",
                                          "git status", "git diff", "git log", "git show", "git branch",
                                          "git rev-parse", "git ls-files", "git blame")]],
    ),
    "standard": Preset(
        "standard", "edits inside the worktree and tests, builds, linters and git reads run; network, installs, "
                    "pushes and anything outside the worktree ask",
        agent_default="ask", tool_default="allow",
        allow=[*(f"{t}(./**)" for t in EDIT_TOOLS), "Read(./**)", "Glob(./**)", "Grep(./**)", "LS(./**)",
               "TodoWrite", "Task", "mcp__agentqueue", "Bash(agentqueue task:*)",  # the toolset, by MCP or the CLI
               *(f"Bash({c}:*)" for c in SAFE_COMMANDS),
               *(f"tool:run_command:{c}:*" for c in SAFE_COMMANDS)],
        ask=["WebFetch", "WebSearch", *(f"Bash({c}:*)" for c in ASK_COMMANDS),
             *(f"tool:{t}" for t in RISKY_TOOLS)],
    ),
    "autonomous": Preset(
        "autonomous", "everything runs without asking (for sandboxes; today's behaviour)",
        agent_default="allow", tool_default="allow", escalate="allow",
    ),
}
DEFAULT_PRESET = "standard"


_parse_text = functools.lru_cache(maxsize=4096)(_parse_rule)
