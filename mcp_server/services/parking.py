"""Agent kinds parked for the whole queue: a login that fails or a usage limit stops every task of the kind.

A kind is parked per account, the credentials a daemon gives that kind (a fingerprint of its key variables, or of
the CLI's own login on that machine), because that is what a 401 or a 429 is about: in team mode two daemons with
the same key share the limit, and a daemon with another key is not held by it. Rows stay after a resume (resumed_at
set) so a limit that comes back soon backs off further. One `queue.parked` event per parking, one `queue.resumed`
per resume (by "check", "reset_time" or "person"). The engine parks and resumes (engine/parking.py); get_status,
the board and `agentqueue status` read `parked()`.

Imports nothing heavy: `agentqueue status` reads it over a plain read-only store.
"""

from __future__ import annotations

import hashlib
import os
import socket
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from .failures import CONFIG_HINT, LOGIN

if TYPE_CHECKING:
    from ..store.base import Store

# Agent kinds with a login or key of their own; a command agent's failures are its own, it never parks.
PARKABLE = ("claude-code", "codex", "gemini")
# The variables that say which account a kind's CLI uses (the key, or where it sends it).
CREDENTIALS: dict[str, tuple[str, ...]] = {
    "claude-code": ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "CLAUDE_CODE_USE_BEDROCK",
                    "CLAUDE_CODE_USE_VERTEX", "CLAUDE_CODE_OAUTH_TOKEN"),
    "codex": ("OPENAI_API_KEY", "CODEX_API_KEY", "OPENAI_BASE_URL"),
    "gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GEMINI_BASE_URL", "GOOGLE_GENAI_USE_VERTEXAI"),
}
WHAT = {"auth": "its login failed", "rate_limit": "the model API is rate-limiting it",
        "quota": "its usage limit is used up"}


def account(agent_type: str, env: Mapping[str, str]) -> str:
    """Which credentials `env` gives the kind: `key:<hash>` of its key variables, or `login:<hash>` of the machine's
    user and HOME when it has none (the CLI's own login). A hash only: no key is ever stored."""
    values = [f"{name}={env[name]}" for name in CREDENTIALS.get(agent_type, ()) if env.get(name)]
    if values:
        return "key:" + hashlib.sha256("\n".join(values).encode()).hexdigest()[:12]
    who = f"{socket.gethostname()}\n{env.get('HOME') or os.path.expanduser('~')}"
    return "login:" + hashlib.sha256(who.encode()).hexdigest()[:12]


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def iso_at(epoch: float) -> str:
    return _iso(datetime.fromtimestamp(epoch, UTC))


def _parse(stamp: str | None) -> datetime | None:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")) if stamp else None


def fix_for(agent_type: str, reason: str, until: str | None) -> str:
    """The one thing to do, in words a person acts on."""
    if reason == "auth":
        login = LOGIN.get(agent_type, "log its CLI in or set its API key")
        return (f"Log in: {login} {CONFIG_HINT}. The queue resumes by itself once a check shows the login works, "
                "or at once with `agentqueue resume`.")
    when = f"at {until}" if until else "after a backoff"
    if reason == "quota":
        return (f"Nothing to do: it resumes by itself {when} when the usage limit resets; `agentqueue resume` tries "
                "sooner. Raise the account's limit if it keeps happening.")
    return (f"Nothing to do: it resumes by itself {when}; `agentqueue resume` tries sooner. Lower "
            "max_concurrent_agents if it keeps happening.")


class Parking:
    def __init__(self, store: Store) -> None:
        self.store = store

    def park(self, agent_type: str, account_id: str, reason: str, message: str, *, until: str | None = None,
             backoff: tuple[float, float] | None = None, check_in: float | None = None,
             owner: str | None = None) -> dict[str, Any] | None:
        """Park the kind for this account; the row when it was newly parked (its one `queue.parked` event written),
        None when it already was (a later end time is kept).

        `until`: the reset time the error named. Without one, a limit parks for `backoff` (base, cap) seconds,
        doubled for each limit that came back within the cap of the last resume. `check_in`: when an auth
        parking is first checked (engine/parking.py)."""
        with self.store.transaction() as db:
            row = self.store.one("SELECT * FROM parked_agents WHERE agent_type = ? AND account = ?",
                                 (agent_type, account_id))
            now = datetime.now(UTC)
            if row and row["resumed_at"] is None:
                if until and (row["until"] or "") < until and reason != "auth":
                    db.execute("UPDATE parked_agents SET until = ? WHERE agent_type = ? AND account = ?",
                               (until, agent_type, account_id))
                return None
            resumed = _parse(row["resumed_at"]) if row else None
            streak = 1
            if row and resumed and backoff and now - resumed <= timedelta(seconds=backoff[1]):
                streak = int(row["streak"] or 1) + 1  # it came back soon: wait longer this time
            if until is None and reason != "auth" and backoff:
                base, cap = backoff
                until = _iso(now + timedelta(seconds=min(base * (5 if reason == "quota" else 1)
                                                         * 2 ** (streak - 1), cap)))
            if reason == "auth":
                until = None
            fix = fix_for(agent_type, reason, until)
            values = {"agent_type": agent_type, "account": account_id, "reason": reason, "until": until,
                      "message": message[:1000], "fix": fix, "parked_at": _iso(now), "resumed_at": None,
                      "streak": streak, "checks": 0, "owner": owner,
                      "next_check": _iso(now + timedelta(seconds=check_in)) if check_in is not None else None}
            # Another daemon of the team may park the same account at the same moment: whoever writes first parks.
            columns = ", ".join(values)
            marks = ", ".join("?" for _ in values)
            if row:
                sets = ", ".join(f"{name} = ?" for name in values)
                written = db.execute(f"UPDATE parked_agents SET {sets} WHERE agent_type = ? AND account = ? "
                                     "AND resumed_at IS NOT NULL", (*values.values(), agent_type, account_id)).rowcount
            else:
                written = db.execute(f"INSERT INTO parked_agents ({columns}) VALUES ({marks}) "
                                     "ON CONFLICT (agent_type, account) DO NOTHING", tuple(values.values())).rowcount
            if not written:
                return None
            self.store.add_event("queue.parked", payload={
                "agent_type": agent_type, "reason": reason, "until": until, "message": values["message"],
                "fix": fix, "account": account_id})
            return values

    def resume(self, by: str, agent_type: str | None = None, account_id: str | None = None,
               due: bool = False) -> list[dict[str, Any]]:
        """Resume the parked kinds that match (all of them when nothing is named; with `due`, only those whose
        time has come); one `queue.resumed` event each. Returns the rows resumed."""
        where, params = ["resumed_at IS NULL"], []
        if agent_type:
            where.append("agent_type = ?")
            params.append(agent_type)
        if account_id:
            where.append("account = ?")
            params.append(account_id)
        if due:
            where.append("until IS NOT NULL AND until <= ?")
            params.append(_iso(datetime.now(UTC)))
        resumed = []
        with self.store.transaction() as db:
            for row in self.store.all(f"SELECT * FROM parked_agents WHERE {' AND '.join(where)}", tuple(params)):
                changed = db.execute("UPDATE parked_agents SET resumed_at = ? WHERE agent_type = ? AND account = ? "
                                     "AND resumed_at IS NULL", (_iso(datetime.now(UTC)), row["agent_type"],
                                                                row["account"])).rowcount
                if changed:  # another daemon may have resumed it meanwhile: one event, whoever wins
                    self.store.add_event("queue.resumed", payload={
                        "agent_type": row["agent_type"], "by": by, "reason": row["reason"],
                        "account": row["account"]})
                    resumed.append(row)
        return resumed

    def checked(self, agent_type: str, account_id: str, next_in: float, detail: str | None = None) -> None:
        """A login check that still failed: the next one in `next_in` seconds."""
        with self.store.transaction() as db:
            db.execute("UPDATE parked_agents SET next_check = ?, checks = coalesce(checks, 0) + 1, "
                       "message = coalesce(?, message) WHERE agent_type = ? AND account = ? AND resumed_at IS NULL",
                       (_iso(datetime.now(UTC) + timedelta(seconds=next_in)), detail, agent_type, account_id))

    def due_checks(self, accounts: Callable[[], Mapping[str, str]]) -> list[dict[str, Any]]:
        """The auth parkings of this daemon's accounts (kind -> account, asked only when one is due) whose next
        check has come."""
        now = _iso(datetime.now(UTC))
        due = [row for row in self.parked() if row["reason"] == "auth" and (row["next_check"] or "") <= now]
        mine = accounts() if due else {}
        return [row for row in due if mine.get(row["agent_type"]) == row["account"]]

    def orphaned(self, accounts: Callable[[], Mapping[str, str]], alive: Callable[[], set[str]] | None
                 ) -> list[dict[str, Any]]:
        """Auth parkings nothing will check any more: an account this daemon no longer gives the kind (its key was
        changed in [agent_env]) parked by a daemon that is gone (`alive`: the live daemons' ids, team mode; None:
        this daemon is the only one)."""
        rows = [row for row in self.parked() if row["reason"] == "auth"]
        mine = accounts() if rows else {}
        rows = [row for row in rows if mine.get(row["agent_type"]) != row["account"]]
        live = alive() if rows and alive is not None else set()
        return [row for row in rows if row["owner"] not in live]

    def held_kinds(self, accounts: Mapping[str, str] | Callable[[], Mapping[str, str]]) -> frozenset[str]:
        """The agent kinds this daemon must not start (parked for the account it gives them). `accounts` may be a
        function: it is called only when something is parked (the scheduler's pass stays one tiny read)."""
        rows = self.parked()
        if not rows:
            return frozenset()
        mine = accounts() if callable(accounts) else accounts
        return frozenset(row["agent_type"] for row in rows if mine.get(row["agent_type"]) == row["account"])

    def parked(self) -> list[dict[str, Any]]:
        """Every parked kind, the oldest first (a handful of rows at most)."""
        return self.store.all("SELECT * FROM parked_agents WHERE resumed_at IS NULL ORDER BY parked_at")

    def status(self) -> list[dict[str, Any]]:
        """What get_status, the board and `agentqueue status` show of each parked kind."""
        return [{"agent_type": r["agent_type"], "reason": r["reason"], "until": r["until"], "message": r["message"],
                 "fix": r["fix"], "since": r["parked_at"], "account": r["account"]} for r in self.parked()]


def parked_line(row: Mapping[str, Any]) -> str:
    """One warning line: which kind, why, until when, and the fix."""
    until = f"until {row['until']}" if row.get("until") else "until a check shows the login works"
    message = (row.get("message") or "").strip()
    said = f" {message}{'' if message.endswith(('.', '!', '?')) else '.'}" if message else ""
    return (f"Agent kind {row['agent_type']} is parked ({WHAT.get(row['reason'], row['reason'])}) {until}: its READY "
            f"tasks wait.{said} Fix: {row.get('fix') or ''}")
