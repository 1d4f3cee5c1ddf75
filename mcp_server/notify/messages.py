"""The text of each notification: what happened, which task, and the one thing to do.

Titles, actions, agents' messages and next steps are written by agents or whoever queued the task, and
they reach chat apps that act on what they read: escape sequences and control characters are taken out,
mentions that would page a whole channel (`@everyone`, `@here`, Slack's `<!channel>`) are broken with a
zero-width space, angle brackets become look-alikes (no `<@user>` or `<!here>` is ever formed), links are
defanged (`https://` becomes `hxxps://`, `www.` becomes `www[.]`: no chat app makes them clickable or fetches a
preview, and a person still reads where they point), and every field is capped. The text stays plain here;
delivery.py escapes it per service for the apps that render Markdown anyway.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..cli.advice import terminal_words

TITLE_CAP = 120
FIELD_CAP = 300
BODY_CAP = 1500
# CSI (ESC [ … final), OSC (ESC ] … BEL or ESC \), and any other two-character ESC sequence.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x9b[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b.?")
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff"
                       r"\ud800-\udfff]")
_MASS = re.compile(r"@(everyone|here|channel|all|room)\b", re.I)
# A scheme with `//` (https://, ftp://, javascript://) and a bare `www.` host: what chat apps and mail turn into links.
_LINK = re.compile(r"\b([a-z][a-z0-9+.-]*):(?=//)|\b(www)\.(?=\w)", re.I)
ZWSP = "\u200b"


def clean(text: Any, cap: int = FIELD_CAP, multiline: bool = False) -> str:
    """Hostile text made harmless for a chat app: no escapes or controls, no mass mention, at most `cap` chars."""
    value = _ESCAPES.sub("", str(text if text is not None else ""))
    value = value.replace("\r\n", "\n").replace("\t", " ")
    value = _CONTROLS.sub("", value)
    if not multiline:
        value = " ".join(value.split())
    else:
        value = "\n".join(" ".join(line.split()) for line in value.split("\n")).strip()
    value = value.replace("<", "‹").replace(">", "›")
    value = _MASS.sub(lambda m: "@" + ZWSP + m[1], value)
    value = _LINK.sub(_defang, value)
    return value if len(value) <= cap else value[:cap - 1].rstrip() + "…"


def _defang(match: re.Match[str]) -> str:
    """`https:` -> `hxxps:` (the form security reports use), any other scheme -> `scheme[:]`, `www.` -> `www[.]`."""
    if match[2]:
        return match[2] + "[.]"
    scheme = match[1]
    if scheme.lower() in ("http", "https"):
        return scheme[0] + "xx" + scheme[3:] + ":"
    return scheme + "[:]"


@dataclass(frozen=True)
class Message:
    kind: str
    title: str
    body: str
    task_id: str | None = None
    request_id: str | None = None


@dataclass(frozen=True)
class TaskFacts:
    """What a message says about its task (read from the store when the event is turned into a message)."""

    id: str
    title: str
    project: str
    next_step: str | None = None


def _task_line(task: TaskFacts) -> str:
    return f"Task {task.id} “{clean(task.title, 100)}” (project {clean(task.project, 60)})"


def _board(board_url: str | None, task_id: str) -> str:
    return f"\nBoard: {board_url}/tasks/{task_id}" if board_url else ""


def compose(kind: str, event: dict[str, Any], task: TaskFacts | None, board_url: str | None = None) -> Message:
    """The message for one event of `kind` (config.KINDS); `task` None for a queue-wide event."""
    payload = event.get("payload") or {}
    if kind == "parked":
        return _parked(payload)
    assert task is not None
    line = _task_line(task)
    board = _board(board_url, task.id)
    # A person reads it away from their client: the terminal's commands, not the tools' names (issue 35.8).
    step = clean(terminal_words(task.next_step, task.id), FIELD_CAP) if task.next_step else None
    if kind == "permission":
        request = clean(payload.get("request_id"), 40)
        action = clean(payload.get("action"), FIELD_CAP)
        body = (f"{line} asks a person to allow: {action}\n"
                f"Do: agentqueue allow {request}   (add --remember to keep allowing it), "
                f"or agentqueue deny {request}{board}")
        return Message(kind, clean(f"AgentQueue: task {task.id} asks to run {payload.get('action')}", TITLE_CAP),
                       body[:BODY_CAP], task.id, request)
    if kind == "approval":
        body = (f"{line} is done and waits for your approval.\n"
                f"Do: agentqueue approve {task.id}   (agentqueue diff {task.id} shows the change){board}")
        return Message(kind, clean(f"AgentQueue: task {task.id} awaits approval", TITLE_CAP), body, task.id)
    if kind in ("blocked", "failed"):
        why = clean(terminal_words(payload.get("message") or payload.get("reason"), task.id), FIELD_CAP)
        what = "failed after its retries" if kind == "failed" else "is blocked"
        do = step or f"agentqueue show {task.id}, then agentqueue restart {task.id}"
        body = f"{line} {what}: {why}\nDo: {do}{board}"
        return Message(kind, clean(f"AgentQueue: task {task.id} {what}", TITLE_CAP), body[:BODY_CAP], task.id)
    body = f"{line} completed.\nDo: agentqueue show {task.id}   (nothing is needed){board}"
    return Message(kind, clean(f"AgentQueue: task {task.id} completed", TITLE_CAP), body, task.id)


REASONS = {"auth": "its login failed", "rate_limit": "a rate limit was hit", "quota": "a usage limit was reached"}


def _parked(payload: dict[str, Any]) -> Message:
    agent = clean(payload.get("agent_type") or "agent", 40)
    reason = REASONS.get(str(payload.get("reason")), clean(payload.get("reason") or "it was paused", 60))
    until = f" until {clean(payload['until'], 40)}" if payload.get("until") else ""
    said = f"\n{clean(payload.get('message'), FIELD_CAP)}" if payload.get("message") else ""
    fix = clean(payload.get("fix"), FIELD_CAP) if payload.get("fix") else "agentqueue resume, once it works again"
    body = f"AgentQueue parked every {agent} task{until}: {reason}.{said}\nDo: {fix}"
    return Message("parked", clean(f"AgentQueue: {agent} tasks parked ({payload.get('reason') or 'paused'})",
                                   TITLE_CAP), body[:BODY_CAP])


def digest(messages: list[Message], why: str) -> Message:
    """Several held or digest messages as one: a line each, newest last."""
    lines = [f"• {m.title.removeprefix('AgentQueue: ')}\n  {_do_line(m)}" for m in messages[:30]]
    more = f"\n…and {len(messages) - 30} more (agentqueue status)" if len(messages) > 30 else ""
    return Message("digest", f"AgentQueue: {len(messages)} update(s) {why}", "\n".join(lines) + more)


def _do_line(message: Message) -> str:
    return next((line for line in message.body.splitlines() if line.startswith("Do:")), "")


def test_message() -> Message:
    return Message("test", "AgentQueue: test notification",
                   "This is a test from AgentQueue (agentqueue notify test). Nothing needs doing.")
