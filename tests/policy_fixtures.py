"""A policy per preset, and one command as a Bash action in a worktree: shared by the policy's tests and attacks."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentqueue.services.policy import Policies
from agentqueue.services.policy_rules import Action, agent_action

ROOT = Path("/work/tree")


def bash(command: str) -> Action:
    return agent_action("Bash", {"command": command}, ROOT)


@pytest.fixture(scope="module")
def presets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Policies]:
    out = {}
    for name in ("readonly", "standard", "autonomous"):
        policies = Policies(tmp_path_factory.mktemp(name))
        policies.edit(preset=name)
        out[name] = policies
    return out
