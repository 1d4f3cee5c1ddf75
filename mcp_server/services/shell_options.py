"""What the presets' allowed commands read, write and run beyond their first words.

A preset allows `rg`, `git diff`, `sort` because they read; a handful of their options turn them into
writers (`sort -o`, `git diff --output`), runners (`rg --pre`, `git -c core.pager=…`, `find -exec`) or
readers of other places (`git -C`, `git diff --no-index`). `risks()` names those, so a preset allow
does not cover them; `paths()` lists the files a command's arguments name, which the policy judges
like Read (or Write) actions against the worktree.
"""

from __future__ import annotations

import posixpath
import re
from typing import Literal

from .shell import DANGEROUS_VARIABLES, SimpleCommand

# Commands whose arguments are neither files nor options that act: judged by their name alone.
INERT = {"echo", "printf", "pwd", "true", "false", "test", "[", "which", "type"}


def _spec(short: str = "", long: tuple[str, ...] = ()) -> tuple[str, tuple[str, ...]]:
    return short, long


# name (or "git <subcommand>") -> (risky short option letters, risky long options).
_OPTIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "rg": _spec("z", ("--pre", "--pre-glob", "--search-zip", "--hostname-bin")),
    "sort": _spec("oT", ("--output", "--compress-program", "--temporary-directory", "--files0-from")),
    "find": _spec("", ("-delete", "-exec", "-execdir", "-ok", "-okdir", "-fprint", "-fprint0", "-fprintf", "-fls")),
    "sed": _spec("iw", ("--in-place", "--file")),
    "tee": _spec("", ()),
    "wc": _spec("", ("--files0-from",)),
    "du": _spec("", ("--files0-from",)),
    "git": _spec("cCp", ("--config-env", "--exec-path", "--git-dir", "--work-tree", "--namespace", "--super-prefix",
                         "--paginate", "--config")),
    "git diff": _spec("O", ("--output", "--ext-diff", "--no-index", "--config")),
    "git log": _spec("O", ("--output", "--ext-diff", "--config")),
    "git show": _spec("O", ("--output", "--ext-diff", "--config")),
    "git blame": _spec("S", ("--contents", "--config")),
    "git branch": _spec("dDfmMcCu", ("--delete", "--force", "--move", "--copy", "--set-upstream-to", "--unset-upstream",
                                     "--edit-description", "--track", "--no-track", "--create-reflog", "--config")),
    "git status": _spec("", ("--config",)),
    "git rev-parse": _spec("", ("--config",)),
    "git ls-files": _spec("", ("--config",)),
    "git stash": _spec("", ()),
    "git commit": _spec("", ("--template",)),
    "npm": _spec("C", ("--prefix", "--userconfig", "--globalconfig", "--script-shell", "--node-options", "--cwd",
                       "--dir", "--config")),
    "npx": _spec("pc", ("--package", "--call", "--prefix", "--userconfig", "--node-options")),
    "yarn": _spec("", ("--cwd", "--use-yarnrc", "--prefix", "--config")),
    "pnpm": _spec("C", ("--dir", "--prefix", "--config")),
    "eslint": _spec("co", ("--config", "--rulesdir", "--resolve-plugins-relative-to", "--output-file", "--plugin",
                           "--cache-location", "--ignore-path")),
    "prettier": _spec("", ("--config", "--plugin", "--plugin-search-dir", "--cache-location", "--ignore-path")),
    "tsc": _spec("", ("--outDir", "--outFile", "--out", "--declarationDir", "--tsBuildInfoFile",
                       "--generateTrace", "--build", "--plugins")),
    "vitest": _spec("c", ("--config", "--outputFile", "--root", "--dir", "--globalSetup")),
    "jest": _spec("c", ("--config", "--outputFile", "--rootDir", "--roots", "--globalSetup", "--globalTeardown",
                        "--setupFiles", "--testRunner", "--reporters", "--transform")),
    "pytest": _spec("pco", ("--config-file", "--basetemp", "--junitxml", "--junit-xml", "--override-ini", "--pastebin",
                            "--debug", "--log-file", "--rootdir", "--confcutdir", "--result-log", "--html")),
    "ruff": _spec("o", ("--config", "--cache-dir", "--output-file")),
    "mypy": _spec("", ("--config-file", "--cache-dir", "--junit-xml", "--python-executable", "--shadow-file",
                       "--html-report", "--xml-report", "--txt-report", "--linecount-report", "--lineprecision-report",
                       "--any-exprs-report", "--cobertura-xml-report", "--xslt-html-report", "--xslt-txt-report")),
    "black": _spec("", ("--config", "--python-cell-magics")),
    "flake8": _spec("", ("--config", "--append-config", "--output-file", "--tee", "--bug-report")),
    "go": _spec("", ("-o", "-exec", "-toolexec", "-overlay", "-modfile", "-C", "-pkgdir", "-outputdir", "-vettool",
                       "-coverprofile", "-cpuprofile", "-memprofile", "-blockprofile", "-mutexprofile", "-trace",
                       "-json", "-fuzzcachedir")),
    "gofmt": _spec("", ()),
    "cargo": _spec("CZ", ("--config", "--target-dir", "--manifest-path", "--artifact-dir", "--out-dir", "--config")),
    "make": _spec("fCIE", ("--file", "--makefile", "--directory", "--include-dir", "--eval", "--what-if", "--new-file",
                           "--assume-new")),
    "mvn": _spec("", ("-f", "-s", "-gs", "-t", "--file", "--settings", "--global-settings", "--toolchains")),
    "gradle": _spec("", ("-b", "-c", "-I", "-p", "-g", "--build-file", "--settings-file", "--init-script",
                         "--project-dir", "--gradle-user-home",
                              "--project-cache-dir", "--include-build")),
    "dotnet": _spec("", ("-o", "-s", "-d", "--output", "--results-directory", "--settings", "--diag", "--project")),
}
# Options that are one option under several spellings, as the spelling a rule is compared in: `rm --recursive`,
# `rm -R` and `rm -r` are one, so a deny on `rm -rf` holds for each (long options also by unambiguous prefix).
_SAME_OPTION: dict[str, dict[str, str]] = {
    "rm": {"-R": "-r", "--recursive": "-r", "--force": "-f", "--dir": "-d", "--interactive": "-i",
           "--verbose": "-v", "--one-file-system": "--one-file-system", "--no-preserve-root": "--no-preserve-root",
           "--preserve-root": "--preserve-root"},
    "cp": {"-R": "-r", "--recursive": "-r", "--force": "-f", "--archive": "-a", "--link": "-l",
           "--symbolic-link": "-s", "--no-dereference": "-P", "--dereference": "-L", "--update": "-u"},
    "mv": {"--force": "-f", "--interactive": "-i", "--no-clobber": "-n", "--update": "-u"},
    "chmod": {"--recursive": "-R", "--changes": "-c", "--silent": "-f", "--quiet": "-f", "--verbose": "-v"},
    "chown": {"--recursive": "-R", "--changes": "-c", "--silent": "-f", "--quiet": "-f", "--verbose": "-v"},
    "chgrp": {"--recursive": "-R", "--changes": "-c", "--silent": "-f", "--quiet": "-f", "--verbose": "-v"},
    "git push": {"--force": "-f", "--delete": "-d", "--all": "--all", "--mirror": "--mirror", "--tags": "--tags",
                 "--force-with-lease": "--force-with-lease"},
    "git clean": {"--force": "-f", "--dry-run": "-n", "--interactive": "-i", "--quiet": "-q"},
    "git reset": {"--hard": "--hard", "--soft": "--soft", "--mixed": "--mixed", "--keep": "--keep"},
    "git checkout": {"--force": "-f"},
    "git branch": {"--delete": "-d", "--force": "-f", "--move": "-m"},
}
_GIT_VALUE_GLOBALS = {"-c", "-C", "--git-dir", "--work-tree", "--namespace", "--config-env", "--super-prefix"}
_PATTERN_FIRST = {"grep", "egrep", "fgrep", "rg"}
_WRITES_ARGS = {"mkdir": "all", "uniq": "second"}


def _key(words: tuple[str, ...]) -> tuple[str, int]:
    """The table key and the index of the first argument after it (`git diff` skips git's own options)."""
    name = posixpath.basename(words[0])
    if name in ("gradlew",):
        name = "gradle"
    if name in ("python", "python3") and words[1:3] == ("-m", "pytest"):
        return "pytest", 3
    if name == "git":
        index = 1
        while index < len(words) and words[index].startswith("-"):
            index += 2 if words[index] in _GIT_VALUE_GLOBALS else 1
        if index < len(words) and f"git {words[index]}" in _OPTIONS:
            return f"git {words[index]}", index + 1
        return "git", index + 1
    if name == "npx" and len(words) > 1 and posixpath.basename(words[1]) in _OPTIONS:
        return posixpath.basename(words[1]), 2
    return name, 1


def _hits(words: tuple[str, ...], start: int, spec: tuple[str, tuple[str, ...]]) -> list[str]:
    letters, longs = spec
    found = []
    for word in words[start:]:
        if word == "--":
            break
        if word.startswith("--") or (word.startswith("-") and any(word.split("=")[0] == o for o in longs)):
            option = word.split("=", 1)[0]
            # getopt_long (and git's parser) accept any unambiguous prefix: `--out` is `--output`.
            if any(o == option or o.startswith("--") and len(option) > 4 and o.startswith(option) for o in longs):
                found.append(option)
        elif word.startswith("-") and len(word) > 1 and letters and any(c in letters for c in word[1:]):
            found.append(word if len(word) <= 12 else word[:12] + "…")
    return found


def risks(command: SimpleCommand) -> list[str]:
    """Why a preset allow does not cover `command`: the options that write, run or reach elsewhere."""
    words = command.words
    name = posixpath.basename(words[0])
    found = [f"{name} {option}" for option in command.risks]
    found += [f"it sets {v}" for v in command.assignments if DANGEROUS_VARIABLES.match(v)]
    if name in ("test", "["):  # arithmetic and `-v a[…]` evaluate a variable's text, `$(…)` included
        found += [f"{name} {w}" for w in words[1:] if w in ("-v", "-R", "-eq", "-ne", "-lt", "-le", "-gt", "-ge")]
    if name in INERT:
        return found
    if command.more_args:
        found.append("arguments that xargs or find add when it runs")
    if not all(command.literal[1:]):
        found.append("an argument that is known only when it runs")
    key, start = _key(words)
    if key.startswith("git"):
        found += [f"git {o}" for o in _hits(words[:start - 1], 1, _OPTIONS["git"])]
        if key != "git":
            found += [f"{key} {o}" for o in _hits(words, start, _OPTIONS[key])]
    elif key in _OPTIONS:
        found += [f"{key} {o}" for o in _hits(words, start, _OPTIONS[key])]
    if key == "git branch":
        listing = {"-l", "--list", "-a", "--all", "-r", "--remotes", "--contains", "--no-contains", "--merged",
                   "--no-merged", "--points-at", "--show-current", "-v", "-vv", "--verbose", "--format", "--sort"}
        positional = [w for w in words[start:] if not w.startswith("-")]
        if positional and not listing & {w.split("=")[0] for w in words[start:]}:
            found.append("git branch <name> creates a branch")
    if key == "make":
        found += [f"make {w.split('=')[0]}=…" for w in words[start:] if re.match(r"[A-Za-z_]\w*=", w)]
    if key == "tee":
        found.append("tee writes files")
    return list(dict.fromkeys(found))


# Option values that are text, not files: a pattern, a commit message.
_TEXT_VALUES = {"grep": ("--regexp", "-e"), "egrep": ("--regexp", "-e"), "fgrep": ("--regexp", "-e"),
                "rg": ("--regexp", "-e"), "git commit": ("--message", "-m"), "git log": ("--grep", "-S", "-G")}


def _option_value(key: str, word: str) -> str | None:
    """The value attached to an option word (`--opt=value`, or `-fPATH` when it looks like a path), if any."""
    text = _TEXT_VALUES.get(key, ())
    if word.startswith("--"):
        option, equals, value = word.partition("=")
        return value if equals and value and option not in text else None
    match = re.match(r"-([A-Za-z0-9]+?)([/~.].*)\Z", word, re.S)
    if match is None or f"-{match[1][-1]}" in text:
        return None
    return match[2]


def paths(command: SimpleCommand) -> list[tuple[Literal["read", "write"], str | None]]:
    """The files and folders a preset-allowed command's arguments name (options' values given as
    separate words count; a grep pattern and a commit message do not)."""
    words = command.words
    name = posixpath.basename(words[0])
    if name in INERT:
        return []
    key, start = _key(words)
    out: list[tuple[Literal["read", "write"], str | None]] = []
    positional: list[str | None] = []  # None: an expansion, known only when it runs
    skip_next = False
    options_done = False
    for word, literal in zip(words[start:], command.literal[start:], strict=True):
        if skip_next:
            skip_next = False
            continue
        if key == "git commit" and word in ("-m", "--message"):
            skip_next = True
            continue
        if not options_done and word == "--":
            options_done = True
            continue
        if not options_done and word.startswith("-") and word != "-":
            value = _option_value(key, word)
            if value is not None:  # `--to-file=/etc/shadow`, `-f/etc/shadow`: a path as much as an operand (L3)
                out.append(("read", value if literal else None))
            continue  # an option; a value given as the next word is judged as an operand
        positional.append(word if literal else None)
    # grep PATTERN FILE…: the first operand is a pattern, unless -e/-f (or --regexp/--file) gave it.
    given = any(w in ("--file", "--regexp") or w.startswith(("--file=", "--regexp=")) or re.match(r"-[^-]*[ef]", w)
                for w in words[1:])
    if name in _PATTERN_FIRST and positional and not given:
        positional = positional[1:]
    writes = _WRITES_ARGS.get(name)
    for index, operand in enumerate(positional):
        kind: Literal["read", "write"] = "write" if writes == "all" or writes == "second" and index == 1 else "read"
        out.append((kind, operand))
    return out


def _same_options(name: str, words: list[str]) -> set[str]:
    """The options in `words` (up to `--`) in the spelling rules are compared in: `-rf` is {-r, -f}."""
    table = _SAME_OPTION.get(name, {})
    out: set[str] = set()
    for word in words:
        if word == "--":
            break
        if word.startswith("--"):
            option = word.split("=", 1)[0]
            # getopt_long takes an unambiguous prefix: `--rec` is `--recursive`
            known = [long for long in table if long.startswith("--") and long.startswith(option)]
            out.add(table.get(option) or (table[known[0]] if len(known) == 1 and len(option) > 3 else option))
        elif word.startswith("-") and len(word) > 1:
            out.update(table.get(f"-{letter}", f"-{letter}") for letter in word[1:])
    return out


def has_options(spec: str, words: tuple[str, ...]) -> bool:
    """Whether a prefix rule `cmd [sub] -abc --long:*` names `words` in another spelling of its options:
    the same command and subcommand, and every option the rule names among the command's, in any order,
    grouping or long form, before or after its operands."""
    if not spec.endswith(":*") or not words:
        return False
    rule = spec[:-2].split()
    lead = [w for w in rule if not w.startswith("-")]
    options = [w for w in rule if w.startswith("-")]
    if not options or not lead or rule[:len(lead)] != lead:
        return False  # only `cmd [sub] -options`: anything else is matched as written
    operands = [posixpath.basename(words[0])] + [w for w in _without_git_globals(words)[1:] if not w.startswith("-")]
    if operands[:len(lead)] != [posixpath.basename(lead[0]), *lead[1:]]:
        return False
    name = " ".join(lead)
    return _same_options(name, options) <= _same_options(name, list(words[1:]))


def _without_git_globals(words: tuple[str, ...]) -> tuple[str, ...]:
    """`git -C dir push` as `git push`: git's own options and their values come before the subcommand."""
    if posixpath.basename(words[0]) != "git":
        return words
    index = 1
    while index < len(words) and words[index].startswith("-"):
        index += 2 if words[index] in _GIT_VALUE_GLOBALS else 1
    return (words[0], *words[index:])
