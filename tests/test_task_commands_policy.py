"""A command run for a task (its verify command, a check, a worktree's setup) is judged by the task's project's
policy and sandbox settings, though its worktree lies in no project's folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentqueue.engine.workspaces import Workspaces
from agentqueue.services import Services
from agentqueue.services.policy import PermissionDeniedError

from .git_fixtures import git_env  # noqa: F401  (fixture)


def test_a_tasks_command_in_its_worktree_meets_its_projects_deny_rule(services: Services, git_env: Path) -> None:
    services.projects.create("Strict")
    services.policies.edit(project_id="strict", add_rule="tool:run_command:touch:*", rule_list="deny")
    services.repos.add("strict", "init", name="repo")
    task = services.tasks.create("strict", "Check", "run the checks", repo_id="repo")
    worktree = Workspaces(services.home / "worktrees").prepare(services.repos.get("repo"), task.id, task.title).path
    assert services.files.project_of(worktree) is None  # under the home: no project's folder holds it
    with pytest.raises(PermissionDeniedError, match="touch"):
        services.files.run("touch planted.txt", worktree, timeout=30, actor="verify", task_id=task.id)
    assert not (worktree / "planted.txt").exists()
    # The same command for no task there meets only the global policy, which allows it.
    assert services.files.run("touch allowed.txt", worktree, timeout=30, actor="cli").returncode == 0
