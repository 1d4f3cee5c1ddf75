"""Domain services: plain typed Python over the store; no MCP imports below this line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .. import paths, settings


class Services:
    """Everything one AGENTQUEUE_HOME holds, wired once per process and shared by all sessions.

    `restart`: how the daemon re-executes itself (restart_daemon); absent in standalone and in-memory servers.
    `migrate=False`: a store at another schema than this code's is refused, never changed (a daemon of older code
    holds it: store.base.StoreNotMigrated).
    The engine, which is built on these services, plugs into `engine_hooks` (services/engine_hooks.py)."""

    def __init__(self, home: Path, *, restart: Callable[[], None] | None = None, migrate: bool = True) -> None:
        # Imported here, not at the top: a module of this package (system.py for `agentqueue status`) can then
        # be imported without pydantic, sqlite-utils and GitPython, which these pull in.
        from ..sandbox.runs import Sandbox
        from ..store.db import open_store
        from .agents import Agents
        from .audit import Audit
        from .call_policy import CallPolicy
        from .channels import Channels
        from .engine_hooks import EngineHooks
        from .events import Events
        from .feedback import Feedback
        from .files import Files
        from .hooks import Hooks
        from .memory import Memory
        from .notes import Notes
        from .parking import Parking
        from .policy import Policies
        from .policy_rules import Action
        from .projects import Projects
        from .repos import Repos
        from .requests import Requests
        from .system import System
        from .tasks import Tasks
        from .team import Team
        from .usage import Usage
        from .vcs import Vcs

        self.home = home
        paths.private_dir(home)
        paths.private_dir(paths.logs_dir(home))
        self.settings = settings.load(home)  # config.toml + AGENTQUEUE_*; a bad value stops here, clearly
        self.store = open_store(paths.db_path(home), self.settings.database_url, migrate=migrate,
                                lease_seconds=self.settings.lease_seconds)
        self.policies = Policies(home)
        self.projects = Projects(self.store, paths.workspaces_dir(home))
        self.engine_hooks = EngineHooks()
        self.tasks = Tasks(self.store, self.projects, self.engine_hooks)
        self.feedback = Feedback(self.store, self.tasks)
        self.agents = Agents(self.store, self.settings)
        self.channels = Channels(self.store, self.projects)
        self.events = Events(self.store)
        self.usage = Usage(self.store)
        self.system = System(self.store, self.agents, restart, home)
        self.repos = Repos(self.store, self.projects, home / "locks")
        self.vcs = Vcs(self.store, self.repos, self.settings)
        self.audit = Audit(self.store)
        # The walls around every process run for a task; installs reach registries only when the policy allows them.
        self.sandbox = Sandbox(home, self.settings, lambda project_id: self.policies.decide(
            Action("Bash", "npm install"), project_id).decision == "allow", self.audit.record)
        self.files = Files(self.store, self.policies, self.sandbox)
        self.notes = Notes(self.store, self.projects)
        self.memory = Memory(self.projects)
        self.hooks = Hooks(self.store, self.projects)
        self.requests = Requests(self.store, self.tasks, self.policies)
        self.parking = Parking(self.store)  # agent kinds parked for the whole queue (a login, a usage limit)
        self.team = Team(self.store, home, self.settings)  # this daemon among those sharing the queue
        self.call_policy = CallPolicy(self)

    def close(self) -> None:
        self.store.close()
