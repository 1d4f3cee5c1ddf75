"""A deny rule on a command's options holds however the options are spelled: reordered, split, grouped,
long, abbreviated, or after the operands (GNU rm reads options anywhere before `--`)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agentqueue.services.policy import Policies

from .conftest import bash

RM_RF = ["rm -rf x", "rm -fr x", "rm -r -f x", "rm -Rf x", "rm -f -R x", "rm --recursive --force x",
         "rm -f -r x", "rm --force -r x", "rm -r --force x", "rm -rfv x", "rm -v -r -f x", "rm x -rf",
         "rm -r x -f", "rm --rec --for x", "rm --recursive -f x", "/bin/rm -fr x", "env rm -fr x",
         "sudo rm -f -r x", "ls; rm -fr x", "timeout 5 rm --force --recursive x", "rm -rif x"]
NOT_RM_RF = ["rm -r x", "rm -f x", "rm x", "rm -- -rf", "rm -i x", "rm --interactive=never -r x", "ls -rf"]


@pytest.mark.parametrize("rule", ["Bash(rm -rf:*)", "Bash(rm -fr:*)", "Bash(rm --recursive --force:*)",
                                  "Bash(rm -r -f:*)"])
@pytest.mark.parametrize("command", RM_RF)
def test_every_spelling_of_rm_rf_is_denied(with_denies: Callable[..., Policies], rule: str, command: str) -> None:
    verdict = _policy(with_denies, rule).decide(bash(command))
    assert (verdict.decision, verdict.rule) == ("deny", rule), f"{command!r} -> {verdict.decided_by}"


@pytest.mark.parametrize("command", NOT_RM_RF)
def test_a_command_without_all_the_options_is_not_denied(with_denies: Callable[..., Policies], command: str) -> None:
    verdict = _policy(with_denies, "Bash(rm -rf:*)").decide(bash(command))
    assert verdict.decision == "allow", f"{command!r} -> {verdict.decided_by}"


@pytest.mark.parametrize(("rule", "command"), [
    ("Bash(git push --force:*)", "git push -f origin main"),
    ("Bash(git push -f:*)", "git push origin main --force"),
    ("Bash(git clean -fd:*)", "git clean -d -f"),
    ("Bash(chmod -R:*)", "chmod --recursive 777 ."),
    ("Bash(cp -r:*)", "cp -a -R src dst"),
])
def test_other_commands_options_are_normalised_too(with_denies: Callable[..., Policies], rule: str,
                                                   command: str) -> None:
    verdict = _policy(with_denies, rule).decide(bash(command))
    assert verdict.decision == "deny", f"{command!r} -> {verdict.decided_by}"


def test_an_ask_rule_on_options_asks_in_every_spelling(with_denies: Callable[..., Policies]) -> None:
    policies = with_denies()
    policies.edit(add_rule="Bash(rm -rf:*)", rule_list="ask")
    verdict = policies.decide(bash("rm -r -f build"))
    assert (verdict.decision, verdict.rule) == ("ask", "Bash(rm -rf:*)"), verdict.decided_by


_MADE: dict[str, Policies] = {}


def _policy(with_denies: Callable[..., Policies], rule: str) -> Policies:
    if rule not in _MADE:
        _MADE[rule] = with_denies(rule)
    return _MADE[rule]
