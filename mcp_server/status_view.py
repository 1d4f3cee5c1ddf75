"""`agentqueue status`: a human view of the queue, read straight from the store."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from . import paths
from .daemon import lock_is_held, read_daemon_info
from .services import Services


def print_status(home: Path) -> int:
    console = Console()
    if not paths.db_path(home).exists():
        console.print(f"No AgentQueue data in {home} yet. Start with `agentqueue serve` or add it to a client.")
        return 0
    info = read_daemon_info(home) if lock_is_held(home) else None
    services = Services(home)
    try:
        status = services.system.status()
        daemon = f"daemon pid {info['pid']}" + (f", HTTP {info['http_url']}" if info.get("http_url") else "") \
            if info else "daemon not running"
        console.print(f"[bold]AgentQueue[/] {home} — {daemon}; orchestrator {status['orchestrator']['state']}")
        projects = Table("project", "status", "weight", "max agents", *[s.lower() for s in
                         ("READY", "IN_PROGRESS", "BLOCKED", "COMPLETED")], title="Projects")
        for project in services.projects.list(limit=500)[0]:
            counts = project.task_counts
            projects.add_row(project.id, project.status, f"{project.credit_weight:g}",
                             str(project.max_concurrent_agents),
                             *[str(counts.get(s, 0)) for s in ("READY", "IN_PROGRESS", "BLOCKED", "COMPLETED")])
        console.print(projects)
        agents = Table("agent", "type", "state", "task", title="Agents")
        for agent in status["agents"]:
            agents.add_row(agent["id"], agent["agent_type"], agent["state"], agent["current_task"] or "")
        console.print(agents)
        for warning in status["warnings"]:
            console.print(f"[yellow]! {warning}[/]")
    finally:
        services.close()
    return 0
