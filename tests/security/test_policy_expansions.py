"""C6: expansions that make bash run a command are never allowed.

`x='$(cmd)'` and `y='a[$(cmd)]'` are harmless strings until bash evaluates them: `${x@P}` expands a prompt,
and every arithmetic context (`${x:y}`, `${a[y]}`, `${!x}`, `$((y))`, `let y`, `[[ y -eq 1 ]]`, `a[y]=1`…)
evaluates a subscript, `$(cmd)` included. Each form is run by a real bash first, to prove the attack, then
judged: readonly denies, standard asks, and autonomous with a deny rule asks (a deny could hide in it).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from agentqueue.services import shell
from agentqueue.services.policy import Policies

from .conftest import bash

SETUP = "x='$(touch M)'; y='a[$(touch M)]'; a=(1 2); z=abc; set -- 1 2; "
# (the form, a word its reason must contain)
RUNS = [
    ("echo ${x@P}", "prompt"),
    ("echo ${z:y}", "arithmetic"),
    ("echo ${z:0:y}", "arithmetic"),
    ("echo ${a[y]}", "subscript"),
    ("echo ${a[@]:y}", "arithmetic"),
    ("echo ${@:y}", "arithmetic"),
    ("echo ${!y}", "indirection"),
    ('echo "${a[y]}"', "subscript"),
    ("cat <<E\n${a[y]}\nE", "subscript"),
    ("echo ${#a[y]}", "subscript"),
    ("echo ${x@P}${z:y}", "prompt"),
    ("echo $((y))", "arithmetic"),
    ("echo $[y]", "arithmetic"),
    ("((y))", "arithmetic"),
    ("for ((;y-1;)); do :; done", "arithmetic"),
    ("let y", "let"),
    ("let n=y", "let"),
    ("[[ y -eq 1 ]]", "arithmetic"),
    ("[[ -v a[y] ]]", "subscript"),
    ("a[y]=1", "subscript"),
    ("b=([y]=1)", "subscript"),
    ("declare -i n=y", "integer"),
    ("unset 'a[y]'", "subscript"),
    ("printf -v 'a[y]' 1", "subscript"),
    ("read 'a[y]' <<< 1", "subscript"),
    ("test -v 'a[y]'", "-v"),
]


@pytest.mark.parametrize(("form", "word"), RUNS, ids=[repr(r[0])[:40] for r in RUNS])
def test_bash_really_runs_the_command_in_each_form(tmp_path: Path, form: str, word: str) -> None:
    subprocess.run(["bash", "-c", SETUP + form], cwd=tmp_path, capture_output=True, timeout=60)
    assert (tmp_path / "M").exists(), f"bash did not run the command in {form!r}: the attack is wrong"


@pytest.mark.parametrize(("form", "word"), RUNS, ids=[repr(r[0])[:40] for r in RUNS])
def test_each_form_is_never_allowed(presets: dict[str, Policies], with_denies: Callable[..., Policies],
                                    form: str, word: str) -> None:
    guarded = with_denies("Bash(rm -rf:*)")
    for command in (form, SETUP + form):
        for name, policies, expected in (("readonly", presets["readonly"], "deny"),
                                         ("standard", presets["standard"], "ask"),
                                         ("autonomous + a deny", guarded, "ask")):
            verdict = policies.decide(bash(command))
            assert verdict.decision == expected, f"{name}: {command!r} -> {verdict.decision} ({verdict.decided_by})"
    reason = presets["standard"].decide(bash(form)).decided_by
    assert word in reason, reason


@pytest.mark.parametrize("form", ["echo $x", "echo ${x}", 'echo "$@" $1 ${2} $? $# ${#} $! ${!} $$ $- $0 $_',
                                  "echo $((1 + 2)) $((0x1f)) $((2#101))", "((1))", "let 1+2", "[[ 1 -eq 1 ]]",
                                  "cat <<'E'\n${a[y]} $((y))\nE"])
def test_plain_values_and_literal_arithmetic_stay_allowed(presets: dict[str, Policies], form: str) -> None:
    if form.startswith(("let", "((", "[[")):  # nothing a preset allows runs: only the parser's word counts
        assert shell.analyse(form).problems == []
        return
    verdict = presets["readonly"].decide(bash(form))
    assert verdict.decision == "allow", f"{form!r} -> {verdict.decision} ({verdict.decided_by})"


def test_a_reason_names_the_form_and_what_is_wrong(presets: dict[str, Policies]) -> None:
    verdict = presets["standard"].decide(bash("echo ${x@P}"))
    assert "`${x@P}` expands a prompt string, which can run commands" in verdict.decided_by
    verdict = presets["standard"].decide(bash("echo ${x:-a}"))
    assert "`${x:-a}`" in verdict.decided_by and "only `$name` and `${name}`" in verdict.decided_by
