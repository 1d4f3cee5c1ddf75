"""Sending one message to one Apprise URL, and how long to wait before trying a failed one again.

Apprise is imported on the first send, in the notifier's own thread: nothing else pays for it.

A message is plain text (messages.py has defused it) and goes to Apprise as text: Apprise keeps it literal for
Slack (`&`, `<`, `>` escaped, mrkdwn off), Telegram (HTML-escaped), Matrix (a plain `body`), ntfy and email. Some
services render Markdown in whatever they are sent, so for them the text is escaped as CommonMark here, all but
the board's own link on the last line, which stays clickable; Discord also gets `allowed_mentions` that ping
nobody the person did not name in the URL's `ping=`.
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass
from typing import Any

from .messages import Message

log = logging.getLogger("agentqueue.notify")

RETRY_BASE_SECONDS = 15.0
RETRY_MAX_SECONDS = 900.0
MAX_ATTEMPTS = 10  # about two hours of tries; then the message is given up (and logged)
SEND_TIMEOUT = 10.0  # one try's time limit (Apprise's own connect and read limits are shorter)
_KINDS = {"permission": "warning", "failed": "failure", "blocked": "warning", "parked": "warning"}
_apprise_lock = threading.Lock()
# Apprise's plugins for services that render Markdown even in a message sent as plain text.
MARKDOWN_SERVICES = frozenset({"NotifyDiscord", "NotifyGuilded", "NotifyMattermost", "NotifyRocketChat", "NotifyZulip",
                               "NotifyRevolt"})
# CommonMark's escapable punctuation (an `&` only where it would start an entity), as Apprise's own text_to_markdown.
_MARKDOWN_SPECIAL = re.compile(r"([\\_*\[\]()~`>#+=|{}.!<-]|&(?=#?[0-9A-Za-z]{1,32};))")
# compose()'s last line for a task: AgentQueue's own link (no task, agent or repo text ends a body).
_BOARD_LINE = re.compile(r"\nBoard: (https?://[^\s<>]+/tasks/[A-Za-z0-9_-]+)\Z")


@dataclass(frozen=True)
class Outcome:
    ok: bool
    error: str | None = None


def backoff(attempts: int, base: float = RETRY_BASE_SECONDS) -> float:
    """Seconds before try number `attempts + 1`: doubling from `base`, at most RETRY_MAX_SECONDS."""
    return min(base * 2 ** max(attempts - 1, 0), RETRY_MAX_SECONDS)


def warm() -> None:
    """Import Apprise and load its plugins now (about half a second), so the first message does not wait for it."""
    try:
        with _apprise_lock:
            import apprise
        apprise.Apprise().add("json://localhost")
    except Exception:
        log.exception("could not load Apprise")


def send(url: str, message: Message) -> Outcome:
    """Deliver `message` to `url` once; never raises."""
    try:
        with _apprise_lock:  # Apprise's plugin registry loads lazily and is not thread-safe the first time
            import apprise
        sender = apprise.Apprise()
        plugin = apprise.Apprise.instantiate(url)
        if not plugin or not sender.add(plugin):
            return Outcome(False, "Apprise does not understand this URL: check its scheme and form "
                                  "(https://github.com/caronc/apprise/wiki).")
        title, body, body_format = render(message, _names(plugin))
        _mention_nobody(plugin)
        with apprise.LogCapture(level=logging.WARNING, fmt="%(message)s") as captured:
            result = sender.notify(body=body, title=title, body_format=body_format,
                                   notify_type=_KINDS.get(message.kind, "info"), timeout=SEND_TIMEOUT)
        if result:
            return Outcome(True)
        said = [line for line in captured.getvalue().splitlines() if line.strip()]
        return Outcome(False, (said[-1] if said else "the service refused the message")[:300])
    except Exception as error:  # a plugin bug must not take the notifier down
        log.exception("notifier failed")
        return Outcome(False, f"{type(error).__name__}: {error}"[:300])


def _names(plugin: Any) -> set[str]:
    """The plugin's class and its bases (Guilded is Apprise's Discord plugin under another name)."""
    return {cls.__name__ for cls in type(plugin).__mro__}


def render(message: Message, plugin_names: set[str]) -> tuple[str, str, str]:
    """Title, body and Apprise body_format for a service: plain text, or escaped CommonMark where Markdown renders."""
    if not plugin_names & MARKDOWN_SERVICES:
        return message.title, message.body, "text"
    body, link = message.body, ""
    if found := _BOARD_LINE.search(body):
        body, link = body[:found.start()], f"\nBoard: {found[1]}"
    return markdown_escape(message.title), markdown_escape(body) + link, "markdown"


def markdown_escape(text: str) -> str:
    """Every CommonMark control character backslash-escaped: Discord and Mattermost show the text as written."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text)


def _mention_nobody(plugin: Any) -> None:
    """Discord pings whatever its parser finds unless told otherwise, and Apprise's embeds add a line of the pings
    it found in the body: only the pings the URL's `ping=` names (the person's own choice) are allowed and shown."""
    if "NotifyDiscord" not in _names(plugin) or not callable(getattr(plugin, "_send", None)):
        return
    named: dict[str, Any] = plugin.ping_payload(" ".join(plugin.ping)) if getattr(plugin, "ping", None) else {}
    wanted = named.get("allow_mentions") or {}
    allowed = {"parse": ["everyone"] if {"everyone", "here"} & set(wanted.get("parse") or []) else [],
               "users": list(wanted.get("users") or []), "roles": list(wanted.get("roles") or [])}
    original = plugin._send

    def send_with_allowed_mentions(payload: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        payload = {key: value for key, value in payload.items() if key != "allow_mentions"}
        payload["allowed_mentions"] = allowed
        if "embeds" in payload:  # the message is in the embeds; the content is only the line of pings
            payload.pop("content", None)
            if named.get("content"):
                payload["content"] = named["content"]
        return original(payload, *args, **kwargs)

    plugin._send = send_with_allowed_mentions
