"""Runs hooks: decides when they fire, gathers their context, renders templates, acts, records.

Firing rules: periodic and cron hooks are checked every second against `last_fired_at` (persisted,
so a restart neither fires twice nor replays missed cron slots: a missed slot runs once); event
hooks fire from committed events. A hook fires only after its cooldown (`fire_hook` ignores it),
never while a run of it is still going (cron and periodic firings then are recorded as skipped:
overlap), and at most `max_concurrent` hook runs go at once. A paused orchestrator skips `llm`
actions (no new model spend); context steps and `create_task` actions go on.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import re
import shlex
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import datetime, UTC
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from croniter import croniter

from ..sandbox.model_keys import kept_out
from ..services import Services
from ..services.errors import ServiceError
from ..services.hooks import SCHEDULED, SlotTaken
from ..services.policy_rules import tool_action
from ..store.db import now_iso
from ..store.models import Hook
from .adapters import BUILDERS, PARSERS
from .adapters.base import AgentConfig
from .agent_mcp import agentqueue_server
from .permissions import PermissionChannel
from .acp_client import AcpChannel, sandboxed as acp_sandbox
from .adapters.acp import AcpSession, agent_binary
from .adapters.acp_presets import sandbox_kind
from .runner import RunHandle, run_agent
from .watchdog import WatchdogLimits

log = logging.getLogger("agentqueue.hooks")

OUTPUT_CAP = 50_000
_PLACEHOLDER = re.compile(r"\{\{(.+?)\}\}")


def parse_iso(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


# -- templates ---------------------------------------------------------------------------------------
def _main_text(result: dict[str, Any]) -> str:
    for key in ("stdout", "content", "body", "diff"):
        if result.get(key):
            return str(result[key])
    return json.dumps(result, default=str)


def render(template: str, steps: list[dict[str, Any]], event: dict[str, Any] | None, project_id: str,
           quote: Callable[[str], str] | None = None) -> str:
    """{{step_N}}, {{step_N.field}}, {{event}}, {{event.field}}, {{project_id}}; unknown ones stay as written.
    `quote` is applied to every value put in (shell steps: `shlex.quote`, so a value is data, never code)."""

    def value(match: re.Match[str]) -> str:
        found = lookup(match)
        return found if quote is None or found is match.group(0) else quote(found)

    def lookup(match: re.Match[str]) -> str:
        expr = match.group(1).strip()
        if expr == "project_id":
            return project_id
        if expr == "event":
            return json.dumps(event or {}, default=str)
        if expr.startswith("event."):
            field = expr[len("event."):]
            data = event or {}
            found = data.get(field, (data.get("payload") or {}).get(field))
            return "" if found is None else (found if isinstance(found, str) else json.dumps(found)).strip()
        step = re.fullmatch(r"step_(\d+)(?:\.(\w+))?", expr)
        if step:
            index = int(step.group(1))
            if index >= len(steps):
                return ""
            result = steps[index]
            if step.group(2):
                found = result.get(step.group(2))
                return "" if found is None else (found if isinstance(found, str) else json.dumps(found)).strip()
            return _main_text(result).strip()
        return match.group(0)

    return _PLACEHOLDER.sub(value, template)


def render_step(step: dict[str, Any], steps: list[dict[str, Any]], event: dict[str, Any] | None,
                project_id: str) -> dict[str, Any]:
    """A context step with its templates filled in; a shell step's command gets its values shell-quoted."""
    rendered = _render_deep(step, steps, event, project_id)
    if step.get("type") == "shell" and isinstance(step.get("command"), str):
        rendered["command"] = render(step["command"], steps, event, project_id, quote=shlex.quote)
    return rendered


def _render_deep(value: Any, *args: Any) -> Any:
    if isinstance(value, str):
        return render(value, *args)
    if isinstance(value, dict):
        return {k: _render_deep(v, *args) for k, v in value.items()}
    return value


def _truthy(value: Any) -> bool:
    """Template values are strings: "false", "0", "no" and "" are False."""
    if isinstance(value, str):
        return value.strip().lower() not in ("", "0", "false", "no", "off")
    return bool(value)


def should_skip(step: dict[str, Any], result: dict[str, Any]) -> str | None:
    if step.get("skip_llm_if_exit_zero") and result.get("exit_code") == 0:
        return "exit code 0 (skip_llm_if_exit_zero)"
    if step.get("skip_llm_if_empty") and not "".join(
            str(result.get(k) or "") for k in ("stdout", "content", "body", "diff")).strip():
        return "empty output (skip_llm_if_empty)"
    if step.get("skip_llm_if_status_ok") and 200 <= int(result.get("status_code") or 0) < 300:
        return f"HTTP {result.get('status_code')} (skip_llm_if_status_ok)"
    return None


MAX_QUEUED_EVENTS = 100  # per hook; beyond, each further event is recorded as skipped


# -- the runner -----------------------------------------------------------------------------------------
class HookRunner:
    def __init__(self, services: Services, home: Path, clock: Callable[[], datetime] | None = None,
                 max_concurrent: int = 2, listen: bool = True) -> None:
        self.services = services
        self.home = home
        self.clock = clock or (lambda: datetime.now(UTC))
        self.max_concurrent = max_concurrent
        self.active: set[str] = set()
        self._events: list[dict[str, Any]] = []
        # Event firings the global cap held back: they go first on the next tick (events are not re-sent).
        self._held: list[tuple[Hook, str, dict[str, Any]]] = []
        # Events for a hook whose run is going: each runs after it, in order (or is recorded as skipped).
        self._queued: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        self._tg: anyio.abc.TaskGroup | None = None
        # Model runs going now, by hook: the daemon knows a connection from one's processes as hook:<id>.
        self.llm_runs: dict[str, RunHandle] = {}
        if listen:
            services.store.on_commit(self._on_commit)

    # -- when ----------------------------------------------------------------------------------
    def _on_commit(self, events: list[dict[str, Any]]) -> None:
        # Another daemon's events fire hooks on that daemon, so each event fires a hook once across the team.
        self._events.extend(e for e in events if not e["event_type"].startswith("hook.") and not e.get("remote"))

    def _stamp(self, when: datetime) -> str:
        return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")

    def cooled(self, hook: Hook, now: datetime) -> bool:
        return not hook.last_fired_at or (now - parse_iso(hook.last_fired_at)).total_seconds() >= hook.cooldown_seconds

    def schedule_due(self, now: datetime) -> list[tuple[Hook, str]]:
        """Periodic and cron hooks whose time has come (a missed cron slot counts once)."""
        due = []
        for hook in self.services.hooks.list():
            if not hook.enabled:
                continue
            kind = hook.trigger["type"]
            last = parse_iso(hook.last_fired_at or hook.created_at)
            if kind == "periodic":  # first at created_at + interval, then every interval (cooldown permitting)
                interval = max(float(hook.trigger["interval_seconds"]), float(hook.cooldown_seconds))
                if (now - last).total_seconds() >= interval:
                    due.append((hook, "periodic"))
            elif kind == "cron":
                next_slot = croniter(hook.trigger["cron"], last).get_next(datetime)
                if now >= next_slot:
                    due.append((hook, "cron"))
        # Longest-waiting first, so under the global cap a busy hook cannot starve the others.
        due.sort(key=lambda pair: parse_iso(pair[0].last_fired_at or pair[0].created_at))
        return due

    def event_matches(self, hook: Hook, event: dict[str, Any]) -> bool:
        if not hook.enabled or hook.trigger["type"] != "event":
            return False
        wanted = hook.trigger["event_type"]
        kind = event["event_type"]
        if not (kind == wanted or (wanted.endswith("*") and kind.startswith(wanted[:-1]))):
            return False
        payload = event.get("payload") or {}
        if payload.get("created_by_hook") == hook.id:
            return False  # a hook never reacts to the task it created itself (no feedback loop)
        for field, expected in (hook.trigger.get("filter") or {}).items():
            if event.get(field, payload.get(field)) != expected:
                return False
        return True

    def pending(self, now: datetime) -> list[tuple[Hook, str, dict[str, Any] | None]]:
        """Everything that should fire now, cooldown and overlap applied (overlaps recorded as skipped)."""
        firings: list[tuple[Hook, str, dict[str, Any] | None]] = []
        for hook, reason in self.schedule_due(now):
            if hook.id in self.active:
                self.services.hooks.record_skip(hook, reason, "previous run still running (overlap: skip)",
                                                fired_at=self._stamp(now))
                continue
            if self.cooled(hook, now):
                firings.append((hook, reason, None))
        events, self._events = self._events, []
        held, self._held = self._held, []
        if events or held or self._queued:
            firings += self._event_firings(events, held, now, {h.id for h, _, _ in firings})
        return firings

    def _event_firings(self, events: list[dict[str, Any]], held: list[tuple[Hook, str, dict[str, Any]]],
                       now: datetime, firing: set[str]) -> list[tuple[Hook, str, dict[str, Any] | None]]:
        """Every matching event runs now, waits for the hook's current run, or is recorded as skipped (why)."""
        hooks = {h.id: h for h in self.services.hooks.list() if h.trigger["type"] == "event" and h.enabled}
        candidates: list[tuple[Hook, str, dict[str, Any]]] = []
        for hook_id in list(self._queued):  # oldest first: what waited for a run that has ended
            if hook_id not in self.active and hook_id not in firing and hook_id in hooks and self._queued[hook_id]:
                reason, event = self._queued[hook_id].pop(0)
                candidates.append((hooks[hook_id], reason, event))
            if not self._queued.get(hook_id) or hook_id not in hooks:
                self._queued.pop(hook_id, None)
        candidates += [(hooks[h.id], reason, event) for h, reason, event in held if h.id in hooks]
        candidates += [(hook, f"event:{event['event_type']}", event) for event in events for hook in hooks.values()
                       if self.event_matches(hook, event) and event.get("timestamp", "") >= hook.created_at]
        firings: list[tuple[Hook, str, dict[str, Any] | None]] = []
        for hook, reason, event in candidates:
            if hook.id in self.active or hook.id in firing:
                queue = self._queued.setdefault(hook.id, [])
                if len(queue) < MAX_QUEUED_EVENTS:
                    queue.append((reason, event))
                else:
                    self.services.hooks.record_skip(hook, reason, f"{MAX_QUEUED_EVENTS} events already wait for "
                                                    "this hook's run (queue full)", fired_at=self._stamp(now))
            elif not self.cooled(hook, now):
                left = hook.cooldown_seconds - (now - parse_iso(hook.last_fired_at or "")).total_seconds()
                self.services.hooks.record_skip(hook, reason, f"cooldown: {left:.0f} s of {hook.cooldown_seconds} s "
                                                "left", fired_at=hook.last_fired_at)
            else:
                firings.append((hook, reason, event))
                firing.add(hook.id)
        return firings

    async def run_forever(self) -> None:
        self.services.hooks.interrupted()
        async with anyio.create_task_group() as tg:
            self._tg = tg
            while True:
                try:
                    firings = await anyio.to_thread.run_sync(self.pending, self.clock())
                    for index, (hook, reason, event) in enumerate(firings):
                        if len(self.active) >= self.max_concurrent:
                            # The rest wait: schedules come due again by themselves, event firings are held.
                            self._held.extend((h, r, e) for h, r, e in firings[index:] if e is not None)
                            break
                        if hook.id in self.active:
                            continue  # fire_hook started it meanwhile
                        self.active.add(hook.id)  # before any await: no second run can slip in
                        try:
                            run_id = await anyio.to_thread.run_sync(self.begin, hook, reason, event)
                        except SlotTaken:
                            self.active.discard(hook.id)  # another daemon runs this slot
                            continue
                        except BaseException:
                            self.active.discard(hook.id)
                            raise
                        tg.start_soon(self.execute, hook, run_id, event)
                except Exception:
                    log.exception("hook scheduling failed")
                await anyio.sleep(1.0)

    # -- what ----------------------------------------------------------------------------------
    def begin(self, hook: Hook, reason: str, event: dict[str, Any] | None) -> str:
        self.active.add(hook.id)
        return self.services.hooks.start_run(hook, reason, event, self._stamp(self.clock()),
                                             claim_slot=reason in SCHEDULED)

    async def fire(self, hook_id: str, wait: float = 10.0) -> tuple[str, str]:
        """fire_hook: now, ignoring cooldown; refused while a run of the hook is going.

        Waits up to `wait` seconds for the run; a longer one (an llm run) answers "running" and goes on.
        """
        hook = self.services.hooks.get(hook_id)
        if hook.id in self.active:
            raise ServiceError(f"Hook '{hook_id}' is already running; list_hook_runs shows its runs.")
        self.active.add(hook.id)  # before any await: a second fire_hook meanwhile is refused
        try:
            run_id = await anyio.to_thread.run_sync(self.begin, hook, "manual", None)
        except BaseException:
            self.active.discard(hook.id)
            raise
        outcome: dict[str, str] = {}
        done = anyio.Event()

        async def go() -> None:
            outcome["status"] = await self.execute(hook, run_id, None)
            done.set()

        if self._tg is None:  # no engine loop to carry it: run it here
            await go()
        else:
            self._tg.start_soon(go)
            with anyio.move_on_after(wait):
                await done.wait()
        return run_id, outcome.get("status", "running")

    async def execute(self, hook: Hook, run_id: str, event: dict[str, Any] | None) -> str:
        try:
            return await self._execute(hook, run_id, event)
        except Exception as error:
            log.exception("hook %s failed", hook.id)
            why = f"{type(error).__name__}: {error}"
            await anyio.to_thread.run_sync(lambda: self.services.hooks.finish_run(hook, run_id, "failed", response=why))
            return "failed"
        finally:
            self.active.discard(hook.id)

    async def _execute(self, hook: Hook, run_id: str, event: dict[str, Any] | None) -> str:
        finish = self.services.hooks.finish_run
        results: list[dict[str, Any]] = []
        for index, step in enumerate(hook.context_steps):
            result = await anyio.to_thread.run_sync(self.step, hook, render_step(step, results, event, hook.project_id))
            results.append(result)
            why = should_skip(step, result)
            if why:
                skipped = functools.partial(finish, hook, run_id, "skipped", skipped_reason=f"step_{index}: {why}",
                                            context=results)
                await anyio.to_thread.run_sync(skipped)
                return "skipped"
        if hook.action == "create_task":
            template = _render_deep(hook.task_template or {}, results, event, hook.project_id)
            task = await anyio.to_thread.run_sync(lambda: self.services.tasks.create(
                hook.project_id, template["title"], template["description"], int(template.get("priority", 100)),
                template.get("repo_id"), _truthy(template.get("requires_approval", False)),
                created_by_hook=hook.id))
            await anyio.to_thread.run_sync(lambda: finish(hook, run_id, "completed", context=results,
                                                          response=f"created task {task.id}"))
            return "completed"
        if self.services.system.orchestrator_state() == "paused":
            await anyio.to_thread.run_sync(lambda: finish(hook, run_id, "skipped", context=results,
                                                          skipped_reason="orchestrator paused (no new model spend)"))
            return "skipped"
        prompt = render(hook.prompt_template or "", results, event, hook.project_id)
        outcome = await self.run_llm(hook, prompt, run_id)
        status = "completed" if outcome.status == "completed" else "failed"
        response = outcome.summary if status == "completed" else f"{outcome.error_type}: {outcome.error_message}"
        await anyio.to_thread.run_sync(self._record_llm, hook, run_id, status, results, prompt, response, outcome)
        return status

    def _record_llm(self, hook: Hook, run_id: str, status: str, results: Any, prompt: str, response: str,
                    outcome: Any) -> None:
        with self.services.store.transaction():
            self.services.usage.record(project_id=hook.project_id, hook_id=hook.id, tokens=outcome.tokens,
                                       cost_usd=outcome.cost_usd, timestamp=now_iso(),
                                       partial=getattr(outcome, "partial", False))
        self.services.hooks.finish_run(hook, run_id, status, context=results, prompt=prompt, response=response,
                                       tokens=int(outcome.tokens.get("total", 0)))

    async def run_llm(self, hook: Hook, prompt: str, run_id: str) -> Any:
        """The prompt through an agent CLI in the project workspace, with AgentQueue's own MCP server attached."""
        config = hook.llm_config or {}
        agent_type = config.get("agent_type", "claude-code")
        if agent_type not in BUILDERS or agent_type in ("command", "acp") and not config.get("command"):
            raise ServiceError(f"llm_config.agent_type {agent_type!r} cannot run a hook.")
        if agent_type == "command":  # checked at create_hook, and again now: a deny added since stops it
            self.services.policies.require(tool_action("run_command", str(config["command"])), hook.project_id,
                                           f"Hook {hook.id}'s model command `{str(config['command'])[:200]}`")
        refused = self.services.sandbox.blocked(hook.project_id)
        if refused:  # fail closed, as for tasks
            raise ServiceError(refused)
        binary = agent_binary(agent_type, config.get("command"), self.services.settings)
        mcp = agentqueue_server(self.home)
        context = (f"You are running AgentQueue hook '{hook.name}' for project '{hook.project_id}'. The agentqueue "
                   "MCP tools (mcp__agentqueue__*) act on the queue: use them to do what the prompt asks.")
        policy = self.services.policies.effective(hook.project_id)
        deny = [rule.text for rule, _ in policy.rules["deny"] if not rule.tool.startswith("tool:")]
        agent = AgentConfig(agent_type, binary=binary, model=config.get("model"), command=config.get("command"),
                            max_turns=int(config.get("max_turns", 20)), preset=policy.preset.name, deny_rules=deny,
                            sandboxed=self.services.sandbox.unavailable() is None)
        spec = await anyio.to_thread.run_sync(BUILDERS[agent_type], agent, prompt, context, mcp)  # ACP's: an import
        workspace = Path(self.services.projects.get(hook.project_id).workspace)
        workspace.mkdir(parents=True, exist_ok=True)
        limits = WatchdogLimits(stall_seconds=float(config.get("stall_seconds", 300)),
                                timeout_seconds=float(config.get("timeout_seconds", 900)))
        started = time.monotonic()
        nice = int(self.services.settings.engine["agent_nice"])  # as far below the daemon as a task's agent
        # A hook run has no task to wait on: the policy answers, and what it would ask about is denied.
        channel: Any = PermissionChannel(self.services, hook.project_id, None, f"hook:{hook.id}", workspace)
        kind = sandbox_kind(agent_type, config.get("command"))  # whose variables and state folder the run gets
        if isinstance(spec.parser, AcpSession):
            contain = acp_sandbox(self.services, workspace, hook.project_id, None, policy.preset.name,
                                  f"hook:{hook.id}")
            channel = AcpChannel(channel, contain, self.services.settings.agent_environment(kind), nice=nice)
        log_path = self.home / "logs" / "hooks" / f"{hook.id}-{run_id}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)

        def log_line(line: str) -> None:
            with log_path.open("a", encoding="utf-8") as hook_log:
                hook_log.write(line + "\n")
        handle = self.llm_runs[hook.id] = RunHandle()  # run_of_pid: its MCP connection is the hook's own
        try:
            environment = self.services.settings.agent_environment(kind)
            sandboxed = self.services.sandbox.around(spec.argv, environment, workspace, hook.project_id,
                                                     preset=policy.preset.name, actor=f"hook:{hook.id}",
                                                     agent_type=kind, agent_socket=True, log_line=log_line)
            with sandboxed as (argv, env):
                if isinstance(spec.parser, AcpSession):
                    spec.parser.run_env = env  # where the agent's own files are (its CODEX_HOME)
                if isinstance(channel, AcpChannel):  # its terminals hold no model key the gate keeps for the run
                    channel.env = kept_out(channel.env, env)
                result = await run_agent(dataclasses.replace(spec, argv=argv, shown=spec.argv[:3]), workspace,
                                         spec.parser or PARSERS[agent_type](), handle, log_path, limits, env=env,
                                         channel=channel, nice=nice)
        finally:
            if isinstance(channel, AcpChannel):
                channel.close()
            self.llm_runs.pop(hook.id, None)
        log.info("hook %s llm run %s in %.1f s: %s", hook.id, run_id, time.monotonic() - started, result.status)
        return result

    # -- context steps -------------------------------------------------------------------------
    def step(self, hook: Hook, step: dict[str, Any]) -> dict[str, Any]:
        try:
            return getattr(self, f"_step_{step['type']}")(hook, step)
        except ServiceError as error:
            return {"error": str(error)}
        except Exception as error:  # a broken step is recorded, not fatal
            return {"error": f"{type(error).__name__}: {error}"}

    def _workspace(self, hook: Hook) -> Path:
        return Path(self.services.projects.get(hook.project_id).workspace)

    def _step_shell(self, hook: Hook, step: dict[str, Any]) -> dict[str, Any]:
        timeout = int(min(max(int(step.get("timeout", 60)), 1), 600))
        workdir = self._workspace(hook)
        workdir.mkdir(parents=True, exist_ok=True)
        out = self.services.files.run(str(step["command"]), workdir, timeout, actor=f"hook:{hook.id}")
        return {"stdout": out.stdout[:OUTPUT_CAP], "stderr": out.stderr[:10_000],
                "exit_code": -1 if out.timed_out else out.returncode}

    def _step_read_file(self, hook: Hook, step: dict[str, Any]) -> dict[str, Any]:
        found = self.services.files.read(str(step["path"]), self._workspace(hook), 0, int(step.get("max_lines", 500)))
        return {"content": found.content, "total_lines": found.total_lines}

    def _step_http(self, hook: Hook, step: dict[str, Any]) -> dict[str, Any]:
        headers = {"User-Agent": "agentqueue-hook", **(step.get("headers") or {})}
        request = urllib.request.Request(str(step["url"]), headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=float(step.get("timeout", 30))) as response:
                body = response.read(OUTPUT_CAP + 1).decode("utf-8", errors="replace")
                return {"status_code": response.status, "body": body[:OUTPUT_CAP]}
        except urllib.error.HTTPError as error:
            return {"status_code": error.code, "body": error.read(OUTPUT_CAP).decode("utf-8", errors="replace"),
                    "error": str(error)}
        except (urllib.error.URLError, OSError) as error:
            return {"status_code": 0, "body": "", "error": str(error)}

    def _step_db_query(self, hook: Hook, step: dict[str, Any]) -> dict[str, Any]:
        params = step.get("params") or {}
        store = self.services.store
        queries = {
            "recent_task_results": ("SELECT r.task_id, t.title, r.status, r.summary, r.error_type, r.created_at "
                                    "FROM task_results r JOIN tasks t ON t.id = r.task_id WHERE t.project_id = ? "
                                    "ORDER BY r.id DESC LIMIT 10", (hook.project_id,)),
            "task_detail": ("SELECT id, title, status, description, retry_count, branch, pr_url FROM tasks "
                            "WHERE id = ?", (params.get("task_id"),)),
            "recent_events": ("SELECT event_type, task_id, payload, timestamp FROM events WHERE project_id = ? "
                              "ORDER BY id DESC LIMIT 20", (hook.project_id,)),
            "hook_runs": ("SELECT id, trigger_reason, status, skipped_reason, started_at FROM hook_runs "
                          "WHERE hook_id = ? ORDER BY started_at DESC LIMIT 10", (params.get("hook_id") or hook.id,)),
            "task_counts": ("SELECT status, count(*) AS count FROM tasks WHERE project_id = ? GROUP BY status",
                            (hook.project_id,)),
        }
        sql, args = queries[step["query"]]
        rows = store.all(sql, args)
        return {"rows": rows, "count": len(rows)}

    def _step_git_diff(self, hook: Hook, step: dict[str, Any]) -> dict[str, Any]:
        reports = self.services.vcs.diff(hook.project_id, step.get("repo_id"), step.get("base_branch"))
        text = "\n".join(r.get("diff", "") for r in reports)
        errors = [r["error"] for r in reports if r.get("error")]
        return {"diff": text[:OUTPUT_CAP], **({"error": "; ".join(errors)} if errors else {})}

