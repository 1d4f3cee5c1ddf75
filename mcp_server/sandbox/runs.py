"""The sandbox as the engine and the services use it: rules for a run, then the run's argv and environment.

    rules = sandbox.rules_for(workdir, project_id, agent_type="claude-code", env=env)
    with sandbox.contained(argv, env, rules, on_deny) as (argv, env):
        ... start argv with env ...

`blocked(project_id)` says, in one sentence with the fix, why no run may start (fail closed): bubblewrap
missing or broken while the sandbox is required. `[sandbox] required = false` runs unsandboxed instead.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from .. import paths
from ..settings import Settings
from . import bwrap, limits, model_keys
from .gate import NetworkGate
from .cli_homes import CLI_HOMES, make_run_home, person_folder
from .rules import (
    CODEX_HOME_FROZEN, CODEX_RULES, DEFAULT_MAX_PROCESSES, DEFAULT_TMP_SIZE, REGISTRIES, USER_SKILLS, Endpoint,
    SandboxConfigError, SandboxRules, SandboxSettings, closed_loopback, endpoints_of, project_settings, secret_paths,
    state_paths,
)

log = logging.getLogger("agentqueue.sandbox")

# Variables that would lead a sandboxed process to a door the sandbox closed (an agent socket, a proxy of
# the person's own that the allowlist cannot see through).
DROPPED_ENV = ("SSH_AUTH_SOCK", "GPG_AGENT_INFO", "DBUS_SESSION_BUS_ADDRESS", "NO_PROXY", "no_proxy", "ALL_PROXY",
               "all_proxy")
PROXY_ENV = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")


class Sandbox:
    """What applies to runs of one home: config.toml's [sandbox], laid under policy.toml's (global, project)."""

    def __init__(self, home: Path, settings: Settings, decide_install: Callable[[str | None], bool],
                 audit: Callable[..., Any] | None = None) -> None:
        self.home = home
        self.settings = settings
        self.decide_install = decide_install  # whether the policy lets installs run unasked in a project
        self.audit = audit  # Audit.record: each refusal the gate sees is a `sandbox:deny` row
        # A task worktree's repository objects (the engine's Workspaces.objects_for), None for any other folder: they
        # are shown read-only, the rest of that repository's git folder hidden (engine/run_repo.py).
        self.git_objects: Callable[[Path], Path | None] = lambda _workdir: None

    @staticmethod
    def unavailable() -> str | None:
        """Why bubblewrap cannot start here (probed once per process), or None when it can."""
        return bwrap.probe()

    def weakened(self, project_id: str | None) -> str | None:
        """What a person set that lowers the walls of this project's runs, in a few words (the board shows it)."""
        try:
            chosen = self.settings_for(project_id)
        except SandboxConfigError as error:
            return str(error)
        if self.unavailable():
            return "no sandbox: no run starts" if chosen.required is not False else "runs NOT sandboxed"
        return "sandbox network open" if chosen.network == "open" else None

    def deny_recorder(self, actor: str, project_id: str | None, task_id: str | None,
                      log_line: Callable[[str], None] | None = None) -> Callable[[str, int, str], None]:
        """What the network gate calls on a refusal: a line in the run's log and a row in the audit log."""
        def record(host: str, port: int, why: str) -> None:
            log.info("sandbox refused %s:%s for %s (%s)", host, port, task_id or actor, why)
            if log_line is not None:
                log_line(f"[sandbox] refused a connection to {host}:{port}: {why}")
            if self.audit is not None:
                try:
                    self.audit(actor=actor, action="sandbox:deny", decision="deny",
                               decided_by="sandbox network allowlist",
                               outcome="refused", message=f"connection to {host}:{port} refused: {why}",
                               project_id=project_id, task_id=task_id, arguments={"host": host, "port": port})
                except Exception:  # the audit must never break a run
                    log.exception("could not audit a sandbox refusal")
        return record

    def settings_for(self, project_id: str | None) -> SandboxSettings:
        return project_settings(self.home / "policy.toml", project_id).over(self.settings.sandbox)

    def required(self, project_id: str | None) -> bool:
        return self.settings_for(project_id).required is not False

    def blocked(self, project_id: str | None) -> str | None:
        """Why no run may start in this project now (one sentence with the fix), or None."""
        try:
            chosen = self.settings_for(project_id)
        except SandboxConfigError as error:
            return str(error)
        if chosen.required is False:
            return None
        return bwrap.probe()

    def rules_for(self, workdir: Path, project_id: str | None, *, preset: str, agent_type: str | None = None,
                  env: Mapping[str, str] | None = None, agent_socket: bool = False,
                  masks: Mapping[Path, bytes | None] | None = None, argv0: str | None = None,
                  files: Sequence[str] = ()) -> SandboxRules:
        env = os.environ if env is None else env
        chosen = self.settings_for(project_id)
        homes = {Path.home(), Path(env.get("HOME") or Path.home())}
        hidden = [p for h in homes for p in secret_paths(h) if os.path.lexists(p)] + [self.home]
        hidden += [p for p in model_keys.person_logins(env, homes) if os.path.lexists(p)]  # copies only (cli_homes)
        writable = [*(p for h in homes for p in state_paths(h, env)), *chosen.writable]
        # Nothing of the repository is writable: the run's own repository is in the worktree, and the repository's
        # git folder (its config, refs, hooks, other tasks' state) is hidden but for its objects, shown read-only.
        objects = self.git_objects(workdir)
        if objects is not None:
            hidden.append(objects.parent)
        found = endpoints_of(env, agent_type, [*writable, workdir])
        hosts = [*closed_loopback(found, chosen.hosts, self.own_ports()), *chosen.hosts]
        if self.decide_install(project_id):
            hosts += REGISTRIES
        sockets = (paths.socket_path(self.home),) if agent_socket else ()
        frozen = _frozen(homes, env, writable) + ((objects,) if objects is not None else ())
        run_home = make_run_home(agent_type, env, paths.runtime_dir())  # the CLI's state: this run's own copy
        run_env = dict(run_home.env) if run_home else {}
        if run_home is not None:
            writable.append(run_home.root)
            frozen += run_home.frozen
        network = chosen.network or "allowlist"
        endpoints = tuple(dict.fromkeys(Endpoint.parse(h) for h in hosts))
        models: tuple[model_keys.ModelRoute, ...] = ()
        if network == "allowlist":  # the gate sees every request: the model keys stay in the daemon (model_keys.py)
            state = run_home.root / CLI_HOMES[agent_type or ""].below if run_home else None
            taken = {e.port for e in endpoints if e.loopback} | {bwrap.PROXY_PORT}
            port = next(p for p in range(model_keys.MODEL_PORT, 65536) if p not in taken)
            plan = model_keys.plan_for(agent_type, env, state, person_folder(agent_type or "", env), port)
            if plan is not None:
                models = (plan.route,)
                run_env.update(plan.env)
        return SandboxRules(workdir=workdir, workdir_writable=preset != "readonly", writable=tuple(writable),
                            hidden=tuple(hidden), sockets=sockets, readable=tuple(programs(env, argv0, files)),
                            frozen=frozen, network=network, endpoints=endpoints, masks=dict(masks or {}),
                            tmp_size=chosen.tmp_size or DEFAULT_TMP_SIZE,
                            max_processes=chosen.max_processes or DEFAULT_MAX_PROCESSES,
                            env=run_env, scratch=(run_home.root,) if run_home else (), models=models)

    def own_ports(self) -> set[int]:
        """AgentQueue's own loopback ports: the daemon's HTTP port and PostgreSQL's (the configured one, and 5432)."""
        ports = {self.settings.port, 5432}
        url = self.settings.database_url
        with contextlib.suppress(ValueError):
            port = urlparse(url).port if url else None
            if port:
                ports.add(port)
        return ports

    @contextlib.contextmanager
    def around(self, argv: list[str], env: Mapping[str, str], workdir: Path, project_id: str | None, *, preset: str,
               actor: str, task_id: str | None = None, agent_type: str | None = None,
               agent_socket: bool = False, masks: Mapping[Path, bytes | None] | None = None,
               log_line: Callable[[str], None] | None = None) -> Iterator[tuple[list[str], dict[str, str]]]:
        """An agent's argv inside the sandbox, its rules stated in its log, the gate open while it runs; as it is
        only when a person set `required = false` and no sandbox can start (the log says so)."""
        say = log_line or (lambda _line: None)
        if self.unavailable():
            say(f"[sandbox] NOT sandboxed: [sandbox] required = false and {self.unavailable()}")
            if note := model_keys.not_kept_out(agent_type, env, "no sandbox"):
                say(f"[sandbox] {note}")
            yield list(argv), dict(env)
            return
        rules = self.rules_for(workdir, project_id, preset=preset, agent_type=agent_type, env=env,
                               agent_socket=agent_socket, masks=masks, argv0=argv[0] if argv else None,
                               files=argv[1:])
        say(f"[sandbox] {rules.describe()}")
        for route in rules.models:
            say(f"[sandbox] {route.note}")
        why = (f"network {rules.network}: no gate to add them" if rules.network != "allowlist" else
               "its provider or login is one the gate cannot stand in for (docs/design.md)")
        if not rules.models and (note := model_keys.not_kept_out(agent_type, env, why)):
            say(f"[sandbox] {note}")
        say(f"[sandbox] limits: {limits.describe(rules.max_processes)}; /tmp, /var/tmp and /run "
            + (f"at most {rules.tmp_size >> 20} MiB each" if bwrap.sizes_tmpfs() else "NOT capped (bubblewrap < 0.8)"))
        with self.contained(argv, env, rules, self.deny_recorder(actor, project_id, task_id, log_line),
                            lambda host, port: self.registry_allowed(project_id, host, port)) as inner:
            yield inner

    def registry_allowed(self, project_id: str | None, host: str, port: int) -> bool:
        """A package registry, once the policy lets installs run unasked (e.g. remember=true on an install request)."""
        return any(Endpoint.parse(r).allows(host, port) for r in REGISTRIES) and self.decide_install(project_id)

    @contextlib.contextmanager
    def contained(self, argv: list[str], env: Mapping[str, str], rules: SandboxRules,
                  on_deny: Callable[[str, int, str], None], also_allows: Callable[[str, int], bool] | None = None
                  ) -> Iterator[tuple[list[str], dict[str, str]]]:
        """`argv` inside bubblewrap under `rules`, with the environment it needs; the gate lives as long as this."""
        inner_env = {k: v for k, v in env.items() if k not in DROPPED_ENV}
        inner_env["TMPDIR"] = "/tmp"  # the sandbox's own; a host TMPDIR may be hidden
        inner_env.update(rules.env)  # the CLI's own state folder for this run (cli_homes.py)
        gate = NetworkGate(rules, on_deny, also_allows) if rules.network == "allowlist" else None
        folder = gate.folder if gate else Path(tempfile.mkdtemp(prefix="sb-", dir=paths.runtime_dir()))
        processes = limits.ProcessLimit(rules.max_processes)
        try:
            if gate is not None:
                proxy = f"http://127.0.0.1:{bwrap.PROXY_PORT}"
                inner_env.update({name: proxy for name in PROXY_ENV})
            yield processes.wrap_outer(bwrap.build_argv(rules, [*processes.inner(), *argv], folder)), inner_env
        finally:
            processes.close()
            if gate is not None:
                gate.close()
            shutil.rmtree(folder, ignore_errors=True)
            for scratch in rules.scratch:
                shutil.rmtree(scratch, ignore_errors=True)


def _frozen(homes: set[Path], env: Mapping[str, str], writable: list[Path]) -> tuple[Path, ...]:
    """The person's skill folders and Codex's rules that lie inside a folder the run may write (created, so none can
    be planted)."""
    candidates = [home_dir / rel for home_dir in homes for rel in (*USER_SKILLS, CODEX_RULES)]
    if env.get("CODEX_HOME"):
        candidates += [Path(env["CODEX_HOME"]) / rel for rel in CODEX_HOME_FROZEN]
    found = []
    for folder in dict.fromkeys(candidates):
        if any(folder.is_relative_to(w) for w in writable):
            with contextlib.suppress(OSError):
                folder.mkdir(parents=True, exist_ok=True)
            found.append(folder)
    return tuple(found)


def programs(env: Mapping[str, str], argv0: str | None, files: Sequence[str] = ()) -> list[Path]:
    """What a run executes that lives under a folder the sandbox makes private (a venv or a CLI under /tmp):
    AgentQueue's own interpreter and package (the relay, the agent's MCP plugin), the folders on PATH, the command's
    own, and the folder of a script the command names (`python /tmp/agent/main.py`). `files` is the run's own argv,
    built from the registered agent: never an agent's terminal command, which must not uncover the host's /tmp by
    naming a file."""
    candidates = [Path(sys.prefix), Path(sys.base_prefix), Path(os.path.realpath(sys.executable)).parent]
    # AgentQueue's own package (the relay, the plugin): outside the venv when it is an editable install's checkout.
    candidates.append(Path(__file__).resolve().parent.parent)
    candidates += [Path(p) for p in env.get("PATH", "").split(os.pathsep) if p]
    if argv0 and os.sep in argv0:
        candidates += [Path(argv0).parent, Path(os.path.realpath(argv0)).parent]
    candidates += [Path(os.path.realpath(f)).parent for f in files if os.path.isabs(f) and os.path.isfile(f)]
    found = []
    for path in candidates:
        real = _install_root(Path(os.path.realpath(path)))
        if real.is_dir() and any(real.is_relative_to(private) for private in bwrap.PRIVATE):
            found.append(real)
    return list(dict.fromkeys(found))


def _install_root(folder: Path) -> Path:
    """A program inside an npm tree needs its sibling packages (Codex loads its binary from
    `@openai/codex-linux-x64`), so the whole outermost `node_modules` is shown, not only the script's folder."""
    parts = folder.parts
    return Path(*parts[:parts.index("node_modules") + 1]) if "node_modules" in parts else folder
