"""A differential fuzz: commands drawn from a grammar of the forms that hide a command (expansions with operators,
subscripts and indirection, arithmetic, here-documents into shells, substitutions, eval/source, quoting tricks,
rm's option spellings), judged by the readonly and standard presets; every command either allows is then run
by bash inside a throwaway bubblewrap sandbox. The hidden command touches a marker (or removes a folder): an
allowed command that did so is a hole. Seeded (POLICY_FUZZ_SEED repeats a run; the seed is in every failure)."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from agentqueue.services.policy import Policies
from agentqueue.services.policy_rules import agent_action

COUNT = 300
RUN = "touch M"  # the hidden command: what no allowed command may do
SETUP = ["x='$(touch M)'", "y='a[$(touch M)]'", "a=(1 2)", "z=abc", "p='\\$(touch M)'"]  # and $1 $2 are 1 2
HIDING = [
    "${x@P}", "${p@P}", "${z:y}", "${z:0:y}", "${a[y]}", "${a[@]:y}", "${@:y}", "${!y}", "${#a[y]}", "$((y))",
    "$[y]", "$((1 + y))", "${x}", "$x", '"$x"', "${#x}", "${x:-d}", "${z}", "$1", '"$@"', "$((1 + 2))",
    "$(touch M)", "`touch M`", "<(touch M)", "\"$(touch M)\"", "'$(touch M)'", "$'\\x74ouch M'",
]
COMMANDS = [
    "((y))", "let y", "let n=y", "let 1+2", "[[ y -eq 1 ]]", "[[ -v a[y] ]]", "[[ 1 -eq 1 ]]", "a[y]=1",
    "b=([y]=1)", "declare -i n=y", "unset 'a[y]'", "printf -v 'a[y]' 1", "read 'a[y]' <<< 1", "test -v 'a[y]'",
    "sh <<'E'\ntouch M\nE", "bash <<E\ntouch M\nE", "bash <<< 'touch M'", "cat <<'E' | sh\ntouch M\nE",
    "echo 'touch M' | bash", "sh -s <<E\ntouch M\nE", "source /dev/stdin <<< 'touch M'", "eval 'touch M'",
    "bash -c 'touch M'", "sh -c \"$x\"", "eval \"$x\"", "'tou'ch M", "t\\ouch M", "$'\\x74ouch' M", "\"touch\" M",
    "echo $'\\' ;touch M; echo \\'", "sh -c \"echo $'\\\\' ;touch M; echo \\\\'\"", "rm -fr D", "rm -r -f D",
    "rm -Rf D", "rm --recursive --force D", "rm D -rf", "rm -r D", "find . -name D -delete", "ls", "git status",
]
WRAPS = ["echo {}", "echo \"{}\"", "cat <<E\n{}\nE", "ls {}", "grep -r {} .", "diff {} a", "head -n {} a",
         "[[ -n {} ]]", "printf '%s' {}", "echo {} | wc -l", "test -n {}"]
JOINS = ["; ", " && ", " || ", " | ", "\n", " & "]


def _piece(rng: random.Random) -> str:
    if rng.random() < 0.7:
        return rng.choice(WRAPS).format(rng.choice(HIDING))
    return rng.choice(COMMANDS)


def _command(rng: random.Random) -> str:
    setup = SETUP if rng.random() < 0.8 else rng.sample(SETUP, rng.randint(0, len(SETUP)))
    parts = [_piece(rng) for _ in range(rng.choice((1, 1, 1, 2, 3)))]
    body = parts[0]
    for part in parts[1:]:
        body += rng.choice(JOINS) + part
    return "; ".join([*setup, body]) if setup else body


def _bwrap() -> str | None:
    found = shutil.which("bwrap")
    if found is None:
        return None
    probe = subprocess.run([found, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "true"],
                           capture_output=True, timeout=60)
    return found if probe.returncode == 0 else None


DRIVER = """
for file in "$1"/cmds/*; do
  run="$1/runs/${file##*/}"; mkdir -p "$run/D"; : > "$run/D/keep"; : > "$run/a"
  (cd "$run" && timeout 5 bash -c "$(cat "$file")" fuzz 1 2 < /dev/null > /dev/null 2>&1)
done
"""


def test_no_allowed_command_runs_the_hidden_one(tmp_path: Path) -> None:
    bwrap = _bwrap()
    if bwrap is None:
        pytest.skip("bubblewrap cannot make a sandbox here")
    seed = int(os.environ.get("POLICY_FUZZ_SEED") or random.SystemRandom().randrange(2**32))
    rng = random.Random(seed)
    work = tmp_path / "w"
    (work / "cmds").mkdir(parents=True)
    (work / "runs").mkdir()
    policies = {}
    for name in ("readonly", "standard"):
        policies[name] = Policies(tmp_path / name)
        (tmp_path / name).mkdir()
        policies[name].edit(preset=name)
    allowed: dict[str, tuple[str, str]] = {}
    for index in range(COUNT):
        command = _command(rng)
        for name, policy in policies.items():
            verdict = policy.decide(agent_action("Bash", {"command": command}, work / "runs" / f"{index:04}"))
            if verdict.decision == "allow":
                allowed[f"{index:04}"] = (command, name)
                (work / "cmds" / f"{index:04}").write_text(command)
                break
    assert allowed, f"seed {seed}: the grammar produced nothing any preset allows: the fuzz tests nothing"
    subprocess.run([bwrap, "--ro-bind", "/", "/", "--tmpfs", "/tmp", "--bind", str(work), str(work),
                    "--unshare-all", "--die-with-parent", "--dev", "/dev", "--proc", "/proc", "--",
                    "bash", "-c", DRIVER, "driver", str(work)], capture_output=True, timeout=600)
    holes = [(key, *allowed[key]) for key in sorted(allowed)
             if (work / "runs" / key / "M").exists() or not (work / "runs" / key / "D").exists()]
    ran = sum(1 for key in allowed if (work / "runs" / key / "a").exists())
    assert ran == len(allowed), f"seed {seed}: only {ran} of {len(allowed)} allowed commands ran in the sandbox"
    assert not holes, f"seed {seed} (POLICY_FUZZ_SEED={seed} repeats it): allowed, and ran the hidden command: " + \
        "; ".join(f"{preset}: {command!r}" for _, command, preset in holes[:5])
