"""Shared by the policy attacks: a policy per preset, and one command as a Bash action in a worktree."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agentqueue.services.policy import Policies

from ..policy_fixtures import ROOT, bash, presets  # noqa: F401  (presets: a fixture)

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
