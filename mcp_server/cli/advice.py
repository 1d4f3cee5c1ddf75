"""Advice in terminal words: the next steps the services word for a model (`restart_task swift-falcon`) as the
commands a person types (`agentqueue restart swift-falcon`), the closest ids to a wrong one, and `show`'s next
step for every status.

The stored texts (a task's `next_step`, get_status's warnings, get_agent_error's fix, a tool's refusal) stay
tool-worded: a model reads them through the tools. Only what the terminal prints goes through `terminal_words`.
Stdlib only (a read imports it).
"""

from __future__ import annotations

import difflib
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..store.base import Store

# A tool the advice names -> the command that does it in a terminal (TASK: the task the advice is about).
COMMANDS: dict[str, str] = {
    "restart_task": "agentqueue restart",
    "stop_task": "agentqueue stop-task",
    "skip_task": "agentqueue skip",
    "delete_task": "agentqueue delete",
    "approve_task": "agentqueue approve",
    "request_changes": "agentqueue request-changes",
    "get_task": "agentqueue show",
    "get_agent_error": "agentqueue show",
    "get_task_result": "agentqueue show",
    "get_task_diff": "agentqueue diff",
    "list_tasks": "agentqueue tasks",
    "list_projects": "agentqueue projects",
    "create_task": "agentqueue add",
    "get_status": "agentqueue status",
    "get_token_usage": "agentqueue usage",
    "answer_request": "agentqueue allow|deny",
    "orchestrator_control": "agentqueue pause|resume",
    "pause_project": "agentqueue pause",
    "resume_project": "agentqueue resume",
    "restart_daemon": "agentqueue restart-daemon",
}
# Tools the advice may name that have no terminal command: a person asks their client (the model) for them, so the
# text keeps the tool's name on purpose.
LEFT_AS_IS = frozenset({"edit_task", "edit_project", "add_repo", "list_repos", "create_agent", "get_policy",
                        "edit_policy", "set_task_status", "create_project", "get_chain_health"})

# What a command needs after the task id that the tool's phrasing leaves out.
_ARGS = {"request_changes": " -m '…'"}
_ID = r"[A-Za-z0-9]+(?:-[A-Za-z0-9]+)+"  # task ids (swift-falcon, swift-falcon-12) always have a hyphen
# Whole phrasings first (they carry arguments), then a tool with its task id, then a bare tool name.
_PHRASES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"answer_request request_id=(\S+) decision=allow or deny \(remember=true keeps the answer as a "
                r"rule for this project\)"),
     r"`agentqueue allow \1` or `agentqueue deny \1` (--remember keeps the answer as a rule for this project)"),
    (re.compile(r"\(answer_request remember=true\)"), "(`agentqueue allow REQUEST --remember`)"),
    (re.compile(r"orchestrator_control action=resume"), "`agentqueue resume`"),
    (re.compile(r"orchestrator_control action=pause"), "`agentqueue pause`"),
    (re.compile(r"list_tasks status=([A-Z_,]+)"), r"`agentqueue tasks --status \1`"),
    (re.compile(r"agentqueue://tasks/\{?(" + _ID + r"|\{id\})\}?/log"), r"`agentqueue logs \1`"),
    (re.compile(r"\band restart_daemon\b( \(it is read at every start\))?"),
     r"and restart the daemon (`agentqueue restart-daemon`)\1"),
    (re.compile(r"\brestart_daemon\b"), "restart the daemon (`agentqueue restart-daemon`)"),
    (re.compile(r"\b(stop_task|restart_task|delete_task|skip_task) it\b"), r"\1 TASK"),
    (re.compile(r"\bdelete_task on a candidate\b"), "`agentqueue delete CANDIDATE`"),
    (re.compile(r"\bget_task_diff shows one\b"), "`agentqueue diff CANDIDATE` shows one"),
]
_TOOL_WITH_ID = re.compile(r"\b(" + "|".join(sorted(COMMANDS, key=len, reverse=True)) + r") (" + _ID + r")\b")
_BARE_TOOL = re.compile(r"(?<![`\w])(" + "|".join(sorted(COMMANDS, key=len, reverse=True)) + r")\b(?! TASK)")
_TOOL_TASK = re.compile(r"\b(" + "|".join(sorted(COMMANDS, key=len, reverse=True)) + r") TASK\b")


def terminal_words(text: str | None, task_id: str | None = None) -> str:
    """`text` with every tool it names as the terminal command (in backticks) that does the same; a bare tool name
    takes `task_id` (when known, else TASK). Tools with no command (LEFT_AS_IS) keep their names."""
    if not text:
        return text or ""
    for pattern, replacement in _PHRASES:
        text = pattern.sub(replacement, text)
    target = task_id or "TASK"
    text = _TOOL_TASK.sub(lambda m: f"`{_command(m.group(1))} {target}`", text)
    text = _TOOL_WITH_ID.sub(lambda m: f"`{_command(m.group(1))} {m.group(2)}{_ARGS.get(m.group(1), '')}`", text)
    return _BARE_TOOL.sub(lambda m: f"`{_command(m.group(1))}" + (f" {task_id}`" if task_id and
                                                                    _takes_task(m.group(1)) else "`"), text)


def _command(tool: str) -> str:
    return COMMANDS[tool]


def _takes_task(tool: str) -> bool:
    return tool.endswith("_task") or tool in ("get_agent_error", "get_task_result", "get_task_diff", "request_changes")


_HEAD = re.compile(r"^Task (" + _ID + r") ")
_HELD = re.compile(r"^Task (" + _ID + r") '.*' is [A-Z_]+: ", re.DOTALL)  # held_line's head, up to its title's end


def warning_words(line: str) -> str:
    """A get_status warning in terminal words: a line about one task fills that task's id into bare tool names.
    A held task's title is left as written (its words are the task's, not advice)."""
    found = _HELD.match(line) or _HEAD.match(line)
    if found is None:
        return terminal_words(line)
    return line[:found.end()] + terminal_words(line[found.end():], found.group(1))


# -- did you mean ---------------------------------------------------------------------------------------------
_NOT_FOUND = re.compile(r"^(Task|Project) '([^']{1,200})' not found\.")


def closest_tasks(store: Store, wanted: str, limit: int = 3) -> list[str]:
    """The task ids nearest to `wanted`, from a few short ranges of the id index (never a read of every task): ids
    starting as it does, and the adjective-noun pairs nearest to its two words (task ids are such pairs)."""
    from ..services.ids import _ADJECTIVES, _NOUNS

    wanted = wanted.strip().lower()
    if not wanted:
        return []
    seen: set[str] = set()
    first, _, rest = wanted.partition("-")
    starts = {wanted[:n] for n in (len(first) + 1, 2) if wanted[:n]}
    adjectives = difflib.get_close_matches(first, _ADJECTIVES, 3, 0.6) or [first]
    nouns = difflib.get_close_matches(rest.split("-")[0], _NOUNS, 3, 0.6) if rest else []
    starts |= {f"{a}-{n}" for a in adjectives for n in nouns} | {f"{a}-" for a in adjectives}
    for start in sorted(starts):
        for row in store.all("SELECT id FROM tasks WHERE id >= ? ORDER BY id LIMIT 40", (start,)):
            seen.add(row["id"])
    return difflib.get_close_matches(wanted, sorted(seen), limit, 0.6)


def closest_projects(store: Store, wanted: str, limit: int = 3) -> list[str]:
    ids = [r["id"] for r in store.all("SELECT id FROM projects ORDER BY id LIMIT 500")]
    return difflib.get_close_matches(wanted.strip().lower(), ids, limit, 0.5)


def with_suggestions(message: str, store_for: Any) -> str:
    """A "Task 'x' not found." refusal with the closest ids after its first sentence; `store_for()` opens a store
    for reading (called only for such a refusal)."""
    found = _NOT_FOUND.match(message)
    if not found:
        return message
    try:
        store = store_for()
    except Exception:  # no store to read: the refusal alone still says what to do
        return message
    try:
        kind, wanted = found.groups()
        near = closest_tasks(store, wanted) if kind == "Task" else closest_projects(store, wanted)
    finally:
        store.close()
    if not near:
        return message
    said = " or ".join(near) if len(near) <= 2 else ", ".join(near[:-1]) + " or " + near[-1]
    return f"{message[:found.end()]} Did you mean {said}?{message[found.end():]}"


# -- show's next step -----------------------------------------------------------------------------------------
def next_step(task: dict[str, Any], error: dict[str, Any] | None, waiting_on: list[dict[str, Any]],
              paused: str | None = None) -> str:
    """What a person can do next about `task`, in terminal commands, for every status (`waiting_on`: its
    dependencies with their statuses, for DEFINED; `paused`: "project" or "orchestrator" when that holds it)."""
    tid, status = task["id"], task["status"]
    if status == "READY" and paused == "project":
        return f"Its project is paused: `agentqueue resume {task['project_id']}` lets it start."
    if status == "READY" and paused == "orchestrator":
        return "The orchestrator is paused: `agentqueue resume` lets it start."
    if task.get("next_step"):  # held, waiting for input, or held for approval: the reason's own next step
        return terminal_words(task["next_step"], tid)
    if status in ("FAILED", "BLOCKED", "PAUSED"):
        fix = (error or {}).get("suggested_fix")
        return terminal_words(fix, tid) if fix else f"`agentqueue restart {tid}` runs it again."
    if status == "READY":
        return f"It starts when an agent is free; `agentqueue logs {tid} -f` follows the run."
    if status == "DEFINED":
        open_deps = [d for d in waiting_on if d["status"] != "COMPLETED"]
        if not open_deps:
            return f"It becomes READY once its dependencies complete; `agentqueue logs {tid} -f` follows the run."
        said = ", ".join(f"{d['id']} ({d['status']})" for d in open_deps[:5])
        more = f" and {len(open_deps) - 5} more" if len(open_deps) > 5 else ""
        stuck = [d["id"] for d in open_deps if d["status"] in ("FAILED", "BLOCKED")]
        step = f"Waiting on {said}{more}: it starts when they complete."
        if stuck:
            step += (f" `agentqueue show {stuck[0]}` says why it stopped; `agentqueue skip {stuck[0]}` lets this "
                     "one run.")
        return step
    if status in ("ASSIGNED", "IN_PROGRESS", "VERIFYING"):
        return f"An agent is on it: `agentqueue logs {tid} -f` follows it; `agentqueue stop-task {tid}` stops it."
    if status == "WAITING_INPUT":
        requests = task.get("pending_requests") or []
        if requests:
            rid = requests[0]["id"]
            return f"The agent waits for you: `agentqueue allow {rid}` or `agentqueue deny {rid}`."
        return f"The agent waits for a person's answer: `agentqueue show {tid}` again lists the request."
    if status == "AWAITING_APPROVAL":
        if task.get("pr_url"):
            return (f"Review and merge its pull request {task['pr_url']} (the task then completes), or "
                    f"`agentqueue request-changes {tid} -m '…'` sends it back.")
        return (f"`agentqueue diff {tid}` shows the work; `agentqueue approve {tid}` lands it, or "
                f"`agentqueue request-changes {tid} -m '…'` sends it back.")
    if status == "COMPLETED":
        return (f"Done. `agentqueue diff {tid}` shows its work; `agentqueue request-changes {tid} -m '…'` sends it "
                "back.")
    return "`agentqueue tasks` lists the queue."
