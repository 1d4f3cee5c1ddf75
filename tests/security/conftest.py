"""Shared by the policy attacks: a policy per preset, and one command as a Bash action in a worktree."""

from __future__ import annotations

from collections.abc import Callable
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


@pytest.fixture(scope="module")
def with_denies(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Policies]:
    """`autonomous` plus a person's deny rules: what is hidden from them must ask, never run."""
    def make(*rules: str) -> Policies:
        policies = Policies(tmp_path_factory.mktemp("denies"))
        policies.edit(preset="autonomous")
        for rule in rules:
            policies.edit(add_rule=rule, rule_list="deny")
        return policies
    return make
