"""Hooks: what should happen on a schedule or an event, and the record of each run.

Triggers: `{"type":"periodic","interval_seconds":N}`, `{"type":"cron","cron":"0 6 * * *"}` (UTC),
`{"type":"event","event_type":"task.completed","filter":{"project_id":"web"}}` (`task.*` matches a
family; filter keys are event fields or payload fields). Actions: `create_task` (from
`task_template`) or `llm` (the rendered `prompt_template` through an agent CLI). The engine's
hook runner decides when to fire; this module validates and stores.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from croniter import croniter

from ..store.db import Store, now_iso
from ..store.models import Hook, HookRun
from .errors import ConflictError, InvalidInputError, NotFoundError, ServiceError, unique
from .limits import MAX_COUNT
from .ids import slugify
from .projects import Projects

STEP_TYPES = ("shell", "read_file", "http", "db_query", "git_diff")
# What each step type reads, besides `type` and the skip flags.
STEP_KEYS = {"shell": ("command", "timeout"), "read_file": ("path", "max_lines"), "http": ("url", "timeout", "headers"),
             "db_query": ("query", "params"), "git_diff": ("repo_id", "base_branch")}
SKIP_FLAGS = ("skip_llm_if_exit_zero", "skip_llm_if_empty", "skip_llm_if_status_ok")
NAMED_QUERIES = ("recent_task_results", "task_detail", "recent_events", "hook_runs", "task_counts")
JSON_FIELDS = ("trigger", "task_template", "context_steps", "llm_config")


def check_trigger(trigger: Any) -> dict[str, Any]:
    if not isinstance(trigger, dict) or trigger.get("type") not in ("periodic", "cron", "event"):
        raise InvalidInputError('trigger must be {"type":"periodic","interval_seconds":N}, '
                                '{"type":"cron","cron":"0 6 * * *"} or {"type":"event","event_type":"task.completed"}.')
    kind = trigger["type"]
    if kind == "periodic":
        interval = trigger.get("interval_seconds")
        if not isinstance(interval, (int, float)) or isinstance(interval, bool) or not 1 <= interval <= MAX_COUNT:
            raise InvalidInputError(f"A periodic trigger needs interval_seconds ≥ 1 (and ≤ {MAX_COUNT}).")
    elif kind == "cron":
        expression = trigger.get("cron")
        if not isinstance(expression, str) or len(expression.split()) != 5 or not croniter.is_valid(expression):
            raise InvalidInputError(f"{expression!r} is not a 5-field cron expression (minute hour day month weekday), "
                                    "e.g. '0 6 * * *'.")
    else:
        if not isinstance(trigger.get("event_type"), str) or not trigger["event_type"].strip():
            raise InvalidInputError("An event trigger needs event_type, e.g. 'task.completed' (or 'task.*').")
        if "filter" in trigger and not isinstance(trigger["filter"], dict):
            raise InvalidInputError("trigger.filter must be an object of field: value pairs.")
    return trigger


def check_steps(steps: Any) -> list[dict[str, Any]]:
    if not isinstance(steps, list) or not all(isinstance(s, dict) for s in steps):
        raise InvalidInputError("context_steps must be a list of objects with a `type`.")
    for index, step in enumerate(steps):
        kind = step.get("type")
        if kind not in STEP_TYPES:
            raise InvalidInputError(f"context_steps[{index}].type {kind!r} is unknown; use one of {', '.join(STEP_TYPES)}.")
        unknown = sorted(set(step) - {"type", *SKIP_FLAGS} - set(STEP_KEYS[kind]))
        if unknown:  # a misspelt flag (skip_if_ok) would silently do nothing
            raise InvalidInputError(f"context_steps[{index}] ({kind}) has unknown key(s) {', '.join(unknown)}; a {kind} "
                                    f"step takes {', '.join(STEP_KEYS[kind])} and the flags {', '.join(SKIP_FLAGS)}.")
        headers = step.get("headers")
        if headers is not None and not (isinstance(headers, dict) and all(
                isinstance(k, str) and isinstance(v, str) for k, v in headers.items())):
            raise InvalidInputError(f"context_steps[{index}].headers must be an object of strings, e.g. "
                                    '{"Authorization": "Bearer …"}.')
        needs = {"shell": "command", "read_file": "path", "http": "url", "db_query": "query"}.get(kind)
        if needs and not step.get(needs):
            raise InvalidInputError(f"context_steps[{index}] ({kind}) needs `{needs}`.")
        if kind == "db_query" and step["query"] not in NAMED_QUERIES:
            raise InvalidInputError(f"context_steps[{index}].query must be one of the named read-only queries: "
                                    f"{', '.join(NAMED_QUERIES)}.")
        if kind == "http" and not str(step["url"]).startswith(("http://", "https://")):
            raise InvalidInputError(f"context_steps[{index}].url must start with http:// or https://.")
    return steps


def check_action(action: str, prompt_template: str | None, task_template: Any) -> None:
    if action not in ("llm", "create_task"):
        raise InvalidInputError("action must be 'llm' or 'create_task'.")
    if action == "llm" and not (prompt_template and prompt_template.strip()):
        raise InvalidInputError("An llm hook needs prompt_template (what to ask the model; {{step_N}} etc. allowed).")
    if action == "create_task":
        if not isinstance(task_template, dict) or not task_template.get("title") or not task_template.get("description"):
            raise InvalidInputError('A create_task hook needs task_template {"title": …, "description": …} '
                                    '(priority, repo_id, requires_approval optional).')
        priority = task_template.get("priority", 0)
        if not isinstance(priority, int) or isinstance(priority, bool) or not -MAX_COUNT <= priority <= MAX_COUNT:
            raise InvalidInputError(f"task_template.priority must be a whole number within ±{MAX_COUNT} "
                                    f"(got {priority!r}).")


class Hooks:
    def __init__(self, store: Store, projects: Projects) -> None:
        self.store = store
        self.projects = projects

    def _model(self, row: dict[str, Any]) -> Hook:
        data = dict(row)
        for key in JSON_FIELDS:
            data[key] = json.loads(row[key]) if row[key] else ([] if key == "context_steps" else None)
        data["enabled"] = bool(row["enabled"])
        return Hook(**data)

    def get(self, hook_id: str) -> Hook:
        row = self.store.one("SELECT * FROM hooks WHERE id = ?", (hook_id,))
        if row is None:
            raise NotFoundError(f"Hook '{hook_id}' not found. list_hooks shows hook ids.")
        return self._model(row)

    def list(self, project_id: str | None = None) -> list[Hook]:
        if project_id:
            self.projects.require(project_id)
            rows = self.store.all("SELECT * FROM hooks WHERE project_id = ? ORDER BY created_at", (project_id,))
        else:
            rows = self.store.all("SELECT * FROM hooks ORDER BY project_id, created_at")
        return [self._model(r) for r in rows]

    def create(self, project_id: str, name: str, trigger: Any, action: str = "llm", prompt_template: str | None = None,
               task_template: Any = None, context_steps: Any = None, cooldown_seconds: int = 3600,
               llm_config: Any = None, enabled: bool = True) -> Hook:
        self.projects.require(project_id)
        if not name or not name.strip():
            raise InvalidInputError("Hook name is empty. Give a name such as 'Nightly tests'.")
        hook_id = slugify(name, what="hook name")
        check_trigger(trigger)
        steps = check_steps(context_steps or [])
        check_action(action, prompt_template, task_template)
        if not 0 <= cooldown_seconds <= MAX_COUNT:
            raise InvalidInputError(f"cooldown_seconds must be ≥ 0 (and ≤ {MAX_COUNT}).")
        if llm_config is not None and not isinstance(llm_config, dict):
            raise InvalidInputError('llm_config must be an object, e.g. {"agent_type": "claude-code", "model": "…"}.')
        if self.store.scalar("SELECT 1 FROM hooks WHERE id = ?", (hook_id,)):
            raise ConflictError(f"A hook with id '{hook_id}' already exists. Choose another name or edit_hook.")
        stamp = now_iso()
        with unique(f"A hook with id '{hook_id}' already exists. Choose another name or edit_hook."), self.store.transaction() as db:
            db["hooks"].insert({
                "id": hook_id, "project_id": project_id, "name": name.strip(), "enabled": int(enabled),
                "trigger": json.dumps(trigger), "action": action, "prompt_template": prompt_template,
                "task_template": json.dumps(task_template) if task_template is not None else None,
                "context_steps": json.dumps(steps), "cooldown_seconds": cooldown_seconds,
                "llm_config": json.dumps(llm_config) if llm_config is not None else None,
                "last_fired_at": None, "created_at": stamp, "updated_at": stamp,
            })
            self.store.add_event("hook.created", project_id=project_id, payload={"hook_id": hook_id})
        return self.get(hook_id)

    def edit(self, hook_id: str, **fields: Any) -> Hook:
        hook = self.get(hook_id)
        changes = {k: v for k, v in fields.items() if v is not None}
        if not changes:
            raise InvalidInputError("Nothing to change. Give any field of create_hook (trigger, prompt_template, …).")
        merged = hook.model_dump() | changes
        if "name" in changes and not str(changes["name"]).strip():
            raise InvalidInputError("name is empty.")
        check_trigger(merged["trigger"])
        check_steps(merged["context_steps"])
        check_action(merged["action"], merged["prompt_template"], merged["task_template"])
        if not 0 <= merged["cooldown_seconds"] <= MAX_COUNT:
            raise InvalidInputError(f"cooldown_seconds must be ≥ 0 (and ≤ {MAX_COUNT}).")
        row = {k: (json.dumps(v) if k in JSON_FIELDS and v is not None else v) for k, v in changes.items()}
        if "enabled" in row:
            row["enabled"] = int(row["enabled"])
        with self.store.transaction() as db:
            db["hooks"].update(hook_id, {**row, "updated_at": now_iso()})
            self.store.add_event("hook.updated", project_id=hook.project_id,
                                 payload={"hook_id": hook_id, "fields": sorted(changes)})
        return self.get(hook_id)

    def delete(self, hook_id: str) -> str:
        hook = self.get(hook_id)
        with self.store.transaction() as db:
            db.execute("DELETE FROM hook_runs WHERE hook_id = ?", (hook_id,))
            db.execute("DELETE FROM hooks WHERE id = ?", (hook_id,))
            self.store.add_event("hook.deleted", project_id=hook.project_id, payload={"hook_id": hook_id})
        return hook_id

    # -- runs ----------------------------------------------------------------------------------
    def start_run(self, hook: Hook, reason: str, event: dict[str, Any] | None, fired_at: str,
                  claim_slot: bool = False) -> str:
        """Record a run of `hook` and move its `last_fired_at` to `fired_at`. With `claim_slot` (the runner's
        periodic and cron firings) the slot is claimed: when another daemon sharing the queue fired it first
        (`last_fired_at` is no longer what `hook` says), SlotTaken and nothing written."""
        run_id = uuid.uuid4().hex[:12]
        with self.store.transaction() as db:
            if claim_slot and not db.execute(
                    "UPDATE hooks SET last_fired_at = ? WHERE id = ? AND last_fired_at IS ?",
                    (fired_at, hook.id, hook.last_fired_at)).rowcount:
                raise SlotTaken(f"Hook '{hook.id}' was fired for this slot by another daemon.")
            db["hook_runs"].insert({
                "id": run_id, "hook_id": hook.id, "project_id": hook.project_id, "trigger_reason": reason,
                "status": "running", "event_data": json.dumps(event) if event else None, "tokens_used": 0,
                "started_at": now_iso(),
            })
            db["hooks"].update(hook.id, {"last_fired_at": fired_at})
        return run_id

    def finish_run(self, hook: Hook, run_id: str, status: str, *, skipped_reason: str | None = None,
                   context: Any = None, prompt: str | None = None, response: str | None = None,
                   tokens: int = 0) -> None:
        with self.store.transaction() as db:
            db["hook_runs"].update(run_id, {
                "status": status, "skipped_reason": skipped_reason,
                "context_results": json.dumps(context, default=str) if context is not None else None,
                "prompt_sent": prompt, "llm_response": response, "tokens_used": tokens, "completed_at": now_iso(),
            })
            self.store.add_event("hook.completed", project_id=hook.project_id, payload={
                "hook_id": hook.id, "run_id": run_id, "status": status, "skipped_reason": skipped_reason})

    def record_skip(self, hook: Hook, reason: str, why: str, fired_at: str | None = None) -> str:
        """A firing that did not run (overlap, paused orchestrator…), recorded so list_hook_runs shows it.

        `fired_at` (the slot's time) consumes the slot: a skipped slot is not recorded again, nor run later.
        """
        try:
            run_id = self.start_run(hook, reason, None, fired_at or hook.last_fired_at or now_iso(),
                                    claim_slot=reason in SCHEDULED)
        except SlotTaken:
            return ""  # another daemon of the team had the slot: it records what it did with it
        self.finish_run(hook, run_id, "skipped", skipped_reason=why)
        return run_id

    def runs(self, hook_id: str, limit: int = 10) -> list[HookRun]:
        self.get(hook_id)
        rows = self.store.all("SELECT * FROM hook_runs WHERE hook_id = ? ORDER BY started_at DESC, rowid DESC "
                              "LIMIT ?", (hook_id, limit))
        out = []
        for row in rows:
            error = row["llm_response"] if row["status"] == "failed" else None
            out.append(HookRun(id=row["id"], hook_id=hook_id, trigger_reason=row["trigger_reason"],
                               status=row["status"], skipped_reason=row["skipped_reason"],
                               tokens_used=row["tokens_used"] or 0, started_at=row["started_at"],
                               completed_at=row["completed_at"], error=error))
        return out

    def run_detail(self, run_id: str) -> dict[str, Any]:
        row = self.store.one("SELECT * FROM hook_runs WHERE id = ?", (run_id,))
        if row is None:
            raise NotFoundError(f"Hook run '{run_id}' not found.")
        return row

    def interrupted(self) -> int:
        """Runs a dead process left `running` are failed (they never finished). On a shared queue a `running` run
        may be another live daemon's, so they are left (hook runs carry no owner)."""
        if self.store.shared:
            return 0
        rows = self.store.all("SELECT id, hook_id FROM hook_runs WHERE status = 'running'")
        for row in rows:
            with self.store.transaction() as db:
                db["hook_runs"].update(row["id"], {"status": "failed", "completed_at": now_iso(),
                                                   "llm_response": "interrupted: the daemon stopped during the run"})
        return len(rows)


SCHEDULED = ("periodic", "cron")  # firings that have a slot in time, which one daemon of a team takes


class SlotTaken(ServiceError):
    """A periodic or cron hook's slot was fired by another daemon of the team first."""
