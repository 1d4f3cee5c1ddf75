"""L3: a path given as an option's value is judged like the same path given as an operand: `diff
--to-file=/etc/shadow a` reads /etc/shadow as surely as `diff a /etc/shadow` does."""

from __future__ import annotations

import pytest

from agentqueue.services.policy import Policies

from .conftest import bash

# (the option spelling, the operand spelling it must be judged as)
PAIRS = [
    ("diff --to-file=/etc/shadow a", "diff a /etc/shadow"),
    ("diff --from-file=/etc/shadow a", "diff /etc/shadow a"),
    ("grep --file=/etc/shadow a", "grep -f /etc/shadow a"),
    ("grep -f/etc/shadow a", "grep -f /etc/shadow a"),
    ("grep --exclude-from=../../secret x .", "grep x ../../secret"),
    ("cat --x=~/.ssh/id_rsa", "cat ~/.ssh/id_rsa"),
    ("diff --to-file=../../x a", "diff a ../../x"),
    ("git diff --output-indicator-new=/etc/passwd", "git diff /etc/passwd"),
]


@pytest.mark.parametrize(("option", "operand"), PAIRS, ids=[p[0] for p in PAIRS])
def test_an_option_value_is_judged_as_the_path_it_names(presets: dict[str, Policies], option: str,
                                                        operand: str) -> None:
    for name in ("readonly", "standard"):
        expected = presets[name].decide(bash(operand)).decision
        got = presets[name].decide(bash(option))
        assert expected != "allow" and got.decision == expected, f"{name}: {option!r} -> {got.decided_by}"


@pytest.mark.parametrize("command", ["diff --to-file=b a", "grep --color=auto x src", "git log --format=%H -1",
                                     "ls --sort=size", "diff --unified=3 a b", "git diff --stat=80"])
def test_values_inside_the_worktree_stay_allowed(presets: dict[str, Policies], command: str) -> None:
    verdict = presets["standard"].decide(bash(command))
    assert verdict.decision == "allow", f"{command!r} -> {verdict.decided_by}"


def test_the_reason_names_the_path(presets: dict[str, Policies]) -> None:
    verdict = presets["standard"].decide(bash("diff --to-file=/etc/shadow a"))
    assert "/etc/shadow" in verdict.decided_by, verdict.decided_by
