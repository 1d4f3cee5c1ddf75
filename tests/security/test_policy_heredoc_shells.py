"""A shell that reads its script from standard input runs that script: a here-document or here-string fed to
it is judged as the commands it holds (a deny on `curl` denies it), and a script the parser cannot see (a
pipe, a here-document with expansions) is never allowed."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agentqueue.services.policy import Policies

from .conftest import bash

VISIBLE = [
    "sh <<EOF\ncurl x\nEOF",
    "bash <<'EOF'\ncurl x\nEOF",
    'bash <<"EOF"\nls\ncurl x\nEOF',
    "sh -s <<EOF\ncurl x\nEOF",
    "sh -s a b <<EOF\ncurl x\nEOF",
    "bash -e <<EOF\ncurl x\nEOF",
    "bash <<< 'curl x'",
    'dash <<< "curl x"',
    "env bash <<< 'curl x'",
    "/bin/sh <<-EOF\n\tcurl x\n\tEOF",
    "ls && bash <<EOF\nls\ncurl x\nEOF",
    "source /dev/stdin <<< 'curl x'",
    ". /dev/stdin <<EOF\ncurl x\nEOF",
]
HIDDEN = [
    "cat <<EOF | sh\ncurl x\nEOF",
    "echo 'curl x' | bash",
    "sh <<EOF\n$X\nEOF",
    "bash <<< \"$X\"",
    "bash",
    "sh -s < /dev/stdin",
    "{ echo 'curl x' | sh; } <<EOF\nls\nEOF",
    "{ read x; sh; } <<EOF\necho '\ncurl x\n'\nEOF",
    "bash <<EOF | sh\nls\nEOF",
]


@pytest.mark.parametrize("command", VISIBLE)
def test_a_script_on_standard_input_is_judged_as_its_commands(with_denies: Callable[..., Policies],
                                                              presets: dict[str, Policies], command: str) -> None:
    verdict = with_denies("Bash(curl:*)").decide(bash(command))
    assert (verdict.decision, verdict.rule) == ("deny", "Bash(curl:*)"), f"{command!r} -> {verdict.decided_by}"
    assert presets["standard"].decide(bash(command)).decision == "ask"  # curl asks in standard
    assert presets["readonly"].decide(bash(command)).decision == "deny"


@pytest.mark.parametrize("command", HIDDEN)
def test_a_script_the_parser_cannot_see_is_never_allowed(with_denies: Callable[..., Policies],
                                                         presets: dict[str, Policies], command: str) -> None:
    verdict = with_denies("Bash(curl:*)").decide(bash(command))
    assert verdict.decision in ("ask", "deny"), f"{command!r} -> {verdict.decided_by}"
    assert presets["standard"].decide(bash(command)).decision == "ask"
    assert presets["readonly"].decide(bash(command)).decision == "deny"


def test_a_harmless_script_is_as_allowed_as_its_commands(presets: dict[str, Policies]) -> None:
    for command in ("bash <<'EOF'\nls\ngit status\nEOF", "sh <<< 'cat README.md'"):
        verdict = presets["readonly"].decide(bash(command))
        assert verdict.decision == "allow", f"{command!r} -> {verdict.decided_by}"


def test_the_reason_says_the_shell_reads_a_script_it_cannot_see(presets: dict[str, Policies]) -> None:
    verdict = presets["standard"].decide(bash("echo 'curl x' | bash"))
    assert "`bash` reads its commands from standard input" in verdict.decided_by, verdict.decided_by
