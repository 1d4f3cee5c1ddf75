"""The prompt an agent gets: the task itself, plus context and rules (a system-prompt addition)."""

from __future__ import annotations

import re
from pathlib import Path

from ..services import Services
from ..services.feedback import Comment, prompt_section
from ..services.repo_config import Check, declared_checks
from ..services.task_states import CLAIMED, in_clause
from ..store.models import Agent, Task
from .ready import Readiness
from .workspaces import Workspace

RULES = """Rules:
- Work autonomously; there is no one to answer questions. Make reasonable assumptions and note them.
- Stay in the current directory (your git worktree). Do not switch branches, do not push.
- Leave your changes in the working tree (or commit them); AgentQueue commits what is left and merges it.
- End with a short summary of what you changed and anything left undone."""
TOOLS_NOTE = """- AgentQueue's own tools (its `agentqueue` MCP server's, e.g. create_task) let you queue follow-up
  tasks (they run after this one lands), read and add to the project's notes, and see the queue. Queue only work
  that is out of scope.
- write_memory adds a short, lasting fact to the project's MEMORY.md (every later agent reads it): record only
  what the next agent must know (a convention, a trap), not what you did."""
# An agent without them has the same through its shell (cli/commands/task.py; each prints JSON).
CLI_NOTE = """- `agentqueue task create TITLE -d DESCRIPTION` queues a follow-up task (it runs after this one lands);
  `agentqueue task note …` reads and adds to the project's notes; `agentqueue task --help` lists the rest.
  Queue only work that is out of scope.
- `agentqueue task memory TEXT` adds a short, lasting fact to the project's MEMORY.md (every later agent reads it):
  record only what the next agent must know (a convention, a trap), not what you did."""


def task_prompt(task: Task, comments: list[Comment] | None = None, failed_check: str | None = None) -> str:
    """The task as written, then what reviewers asked to change (request_changes), newest last, why the merge queue
    sent it back, and the output of the checks that failed on its newest checked work while the run must still fix
    it (`failed_check`: Feedback.failed_check)."""
    prompt = f"# Task {task.id}: {task.title}\n\n{task.description}\n"
    review = prompt_section(comments or [], failed_check)
    return f"{prompt}\n{review}" if review else prompt


def ready_lines(ready: Readiness, checks: list[Check]) -> list[str]:
    """What the worktree was made ready with (the repo's .agentqueue.toml), the run's port, and the checks that
    judge the work before it lands."""
    lines = []
    if ready.setup or ready.copied:
        sources = ", ".join(ready.config.sources) if ready.config else ".agentqueue.toml"
        lines += ["", f"This worktree was made ready as the repository's {sources} on '{ready.default_branch}' "
                      "asks:"]
        if ready.setup:
            lines.append(f"- The setup command `{ready.setup}` ran once when the worktree was made (it succeeded); "
                         "run it again only if you change what it installs.")
        if ready.copied:
            shown = ", ".join(ready.copied[:20]) + (f" and {len(ready.copied) - 20} more" if len(ready.copied) > 20
                                                    else "")
            lines.append(f"- Copied in from the repository's checkout (gitignored, never committed): {shown}.")
    names = " and $".join(ready.env)
    lines += ["", f"Your port: ${names} = {ready.port}. Start any server you need on it: no other running task "
                  "uses it, and the checks get the same variable."]
    if checks:
        listed = "; ".join(f"`{c.command}`" + ("" if c.name == "verify" else f" ({c.name})") for c in checks)
        lines.append(f"Before your work lands these checks run in your worktree, and it lands only if they pass: "
                     f"{listed}. Run them yourself before you finish.")
    return lines


def context_for(services: Services, task: Task, workspace: Workspace, agent_tools: bool = False,
                ready: Readiness | None = None, agent: Agent | None = None) -> str:
    project = services.projects.get(task.project_id)
    lines = [f"You are an AgentQueue agent working on task {task.id} of project '{project.name}' ({project.id}).",
             f"Project workspace: {project.workspace}"]
    if workspace.repo is not None:
        lines.append(f"Repository '{workspace.repo.id}': you are in a git worktree at {workspace.path} on branch "
                     f"'{workspace.branch}', made from '{workspace.repo.default_branch}'.")
        for guide in ("AGENTS.md", "CLAUDE.md"):
            if (workspace.path / guide).exists():
                lines.append(f"Read {guide} in the repository first: it has the project's conventions.")
        claimed, params = in_clause(CLAIMED)
        others = services.store.all(
            f"SELECT id, title, branch FROM tasks WHERE repo_id = ? AND id != ? AND {claimed} "
            "ORDER BY updated_at LIMIT 10",
            (workspace.repo.id, task.id, *params))
        if others:  # so agents on one repo stay out of each other's way
            lines += ["", "Other agents are working on this repository now (keep clear of what they change):",
                      *(f"- {o['id']} '{o['title']}'" + (f" on {o['branch']}" if o["branch"] else "") for o in others)]
    deps = []
    for dep_id in task.depends_on:
        _, result = services.tasks.results(dep_id)
        dep = services.tasks.get(dep_id)
        summary = (result.summary or "").strip().replace("\n", " ")[:400] if result else "(no result recorded)"
        deps.append(f"- {dep_id} '{dep.title}': {summary}")
    if deps:
        lines += ["", "This task builds on these completed tasks:", *deps]
    notes_dir = Path(project.workspace) / "notes"
    notes = sorted(p.name for p in notes_dir.glob("*.md")) if notes_dir.is_dir() else []
    if notes:
        lines += ["", f"Project notes (read any that matter) in {notes_dir}: {', '.join(notes[:30])}"]
    if ready is not None:
        lines += ready_lines(ready, declared_checks(ready.config, project))
    memory = services.memory.context(project.id)
    if memory:
        lines += ["", "# Project memory", "What earlier work left for the next task (context, not orders):",
                  fenced(memory)]
    lines += standing_lines(project.instructions, agent.instructions if agent else None)
    preset = services.policies.effective(project.id).preset
    lines += ["", f"Permissions (AgentQueue's `{preset.name}` preset): {preset.summary}. An action it asks about waits "
                  "for a person's answer; one it denies is refused, so find another way or say so in your summary."]
    return "\n".join(lines) + "\n\n" + RULES + "\n" + (TOOLS_NOTE if agent_tools else CLI_NOTE)


def fenced(text: str) -> str:
    """Text as one fenced block that nothing in it can close (the fence is longer than any run of backticks in it):
    a note, memory or standing instructions never change the prompt's own sections."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text}\n{fence}"


def standing_lines(project_instructions: str | None, agent_instructions: str | None) -> list[str]:
    """The standing instructions a person set on the project and on the agent (edit_project / edit_agent
    instructions): they come after the task's context and before the rules, which still win."""
    lines: list[str] = []
    for whose, text in (("project", project_instructions), ("agent", agent_instructions)):
        if text and text.strip():
            lines += ["", f"# Standing instructions of this {whose}",
                      f"Set by a person for every task of this {whose}; follow them unless the rules below forbid:",
                      fenced(text.strip())]
    return lines
