"""Reads a shell command as bash would run it: every simple command it contains, and every file it redirects.

The permission policy judges what a command runs, so it needs the commands a shell would run, not the
first words of a string. tree-sitter-bash parses the text; this module walks the whole tree (lists,
pipelines, `&`, subshells, groups, `$(…)`, backticks, process substitution, here-documents, `if`/`for`/
`while`/`case` bodies, functions), reads each word as bash would after quote removal, and unwraps
wrappers (`env`, `timeout`, `xargs`, `sudo`, `find -exec`, `bash -c '…'`, `eval`…) to the command they
run. Whatever it cannot account for — a parse error, an expansion in command position, a construct it
does not know, nesting too deep, text too long — becomes a `problem`, which the policy never allows by
a prefix rule. tree-sitter is imported on first use, so the plugin path and tools that judge no command
never load it.
"""

from __future__ import annotations

import os
import posixpath
import re
import shlex
import shutil
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

MAX_COMMAND_CHARS = 100_000  # longer commands are not parsed at all: the policy asks (or denies)
MAX_COMMANDS = 1_000  # more simple commands than this in one command line: asked about as a whole
MAX_DEPTH = 4  # `bash -c "bash -c '…'"`: strings parsed inside strings, this deep
MAX_NESTING = 200  # syntax tree depth walked (deeper is refused, not recursed into)

# Wrappers run the command that follows their own options; the values these options take.
_WRAPPER_VALUE_OPTIONS: dict[str, set[str]] = {
    "env": {"-u", "--unset", "-C", "--chdir", "-S", "--split-string", "-P"},
    "nice": {"-n", "--adjustment"},
    "timeout": {"-s", "--signal", "-k", "--kill-after"},
    "stdbuf": {"-i", "-o", "-e", "--input", "--output", "--error"},
    "xargs": {"-I", "-L", "-n", "-P", "-s", "-d", "-E", "-a", "--arg-file", "--delimiter", "--max-args",
              "--max-procs", "--max-chars", "--max-lines", "--replace", "--eof", "--process-slot-var"},
    "sudo": {"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-T", "-U", "--user", "--group", "--chdir", "--host",
             "--prompt", "--role", "--type", "--command-timeout", "--other-user", "--close-from"},
    "doas": {"-u", "-C"},
    "exec": {"-a"},
    "time": {"-o", "--output", "-f", "--format"},
    "command": set(),
    "builtin": set(),
    "nohup": set(),
    "coproc": set(),
    "setsid": set(),
    "busybox": set(),  # `busybox rm x`: the applet is the command
    "ionice": {"-c", "-n", "--class", "--classdata"},
    "unbuffer": set(),
    "chronic": set(),
}
# Wrapper options that write, read or run something themselves, or move the command elsewhere.
_WRAPPER_RISKS: dict[str, set[str]] = {
    "env": {"-C", "--chdir", "-S", "--split-string", "-P"},
    "time": {"-o", "--output", "-a", "--append"},
    "xargs": {"-a", "--arg-file"},
    "sudo": {"-D", "--chdir", "-e", "--edit", "-s", "--shell", "-i", "--login"},
}
SHELLS = {"sh", "bash", "zsh", "dash", "ksh", "mksh", "ash"}
_FIND_EXEC = {"-exec", "-execdir", "-ok", "-okdir"}
# Setting one of these changes what a later, harmless-looking command runs or reads.
DANGEROUS_VARIABLES = re.compile(
    r"\A(?:PATH|LD_\w+|DYLD_\w+|BASH_ENV|ENV|PAGER|GIT_\w+|MANPAGER|EDITOR|VISUAL|SSH_ASKPASS|RIPGREP_CONFIG_PATH|"
    r"LESSOPEN|LESSCLOSE|PROMPT_COMMAND|IFS|SHELLOPTS|BASHOPTS|PS4|CDPATH|GLOBIGNORE|TAR_OPTIONS|GREP_OPTIONS)\Z")
_STRUCTURAL = {
    "program", "list", "pipeline", "subshell", "compound_statement", "redirected_statement", "negated_command",
    "if_statement", "elif_clause", "else_clause", "for_statement", "c_style_for_statement", "while_statement",
    "do_group", "case_statement", "case_item", "function_definition", "command_substitution",
    "process_substitution", "expansion", "simple_expansion", "arithmetic_expansion", "string", "raw_string",
    "concatenation", "binary_expression", "unary_expression", "ternary_expression", "postfix_expression",
    "parenthesized_expression", "test_command", "variable_assignment", "variable_assignments", "array",
    "subscript", "comment", "word", "number", "ansi_c_string", "string_content", "heredoc_start", "heredoc_end",
    "variable_name", "special_variable_name", "file_descriptor", "test_operator", "regex", "extglob_pattern",
    "brace_expression", "translated_string", "command_name", "heredoc_content", "herestring_redirect",
    "heredoc_redirect", "heredoc_body", "file_redirect",
}
NOT_FILES = {"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/stdin", "/dev/tty", "/dev/zero"}


@dataclass(frozen=True)
class Access:
    """A file a redirection reads or writes; `path` is None when an expansion names it."""

    kind: Literal["read", "write"]
    path: str | None
    cwds: tuple[str | None, ...] = ("",)  # where relative paths may resolve: "" the start, None unknown


@dataclass(frozen=True)
class SimpleCommand:
    """One command a shell would run: its words after quote removal and after its wrappers."""

    words: tuple[str, ...]
    literal: tuple[bool, ...]  # per word: False when an expansion makes it unknowable before it runs
    wrappers: tuple[str, ...] = ()  # the wrappers in front of it, as written (unquoted)
    assignments: tuple[str, ...] = ()  # variable names set for this command (`FOO=1 cmd`, `env FOO=1 cmd`)
    risks: tuple[str, ...] = ()  # a wrapper's own options that write, read or run something
    more_args: bool = False  # xargs / find -exec add arguments no one can see before it runs
    cwds: tuple[str | None, ...] = ("",)

    @property
    def text(self) -> str:
        """The command as one string: what allow rules match (and what `remember` suggests)."""
        pairs = zip(self.words, self.literal, strict=True)
        return " ".join(w if not lit or _plain(w) else shlex.quote(w) for w, lit in pairs)

    def spellings(self) -> list[str]:
        """Every way a deny or ask rule may name this command: as written, by its program's basename,
        with and without the wrappers in front of it."""
        words = list(self.words)
        inner = [self.text, " ".join(words)]
        if "/" in words[0]:
            inner.append(" ".join([posixpath.basename(words[0]), *words[1:]]))
        out = list(inner)
        for start in range(len(self.wrappers)):  # `nice timeout 5 rm` is also `timeout 5 rm`
            chain = " ".join(self.wrappers[start:])
            out += [f"{chain} {text}" for text in inner]
            if "/" in chain.split(" ", 1)[0]:
                out += [f"{posixpath.basename(chain)} {text}" for text in inner]
        return list(dict.fromkeys(out))


@dataclass
class Analysis:
    commands: list[SimpleCommand] = field(default_factory=list)
    accesses: list[Access] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # what the parser cannot account for


def _plain(word: str) -> bool:
    return bool(word) and re.fullmatch(r"[\w@%+=:,./~^{}\[\]*?!#-]+", word) is not None


_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def short(text: str, limit: int = 200) -> str:
    """A command as quoted back to a person: at most `limit` characters, control characters shown as
    escapes (a quoted command never moves the cursor or hides text in a terminal, a log or a question)."""
    cut = text if len(text) <= limit else text[:limit] + f"… ({len(text):,} characters)"
    return _UNPRINTABLE.sub(lambda m: repr(m[0])[1:-1], cut)


def shown(text: str) -> str:
    """An action as a verdict names it: whole while it could be a rule, else cut for quoting."""
    return text if len(text) <= 1_000 else short(text)


def shell_argv(command: str) -> list[str]:
    """The argv that runs `command` in bash: the grammar the policy judged it by (dash, Debian's /bin/sh, reads
    `$'…'` otherwise and would run what bash keeps quoted). /bin/sh only on a machine without bash."""
    return [_bash() or "/bin/sh", "-c", command]


@lru_cache(maxsize=1)
def _bash() -> str | None:
    return next((p for p in ("/bin/bash", "/usr/bin/bash") if os.access(p, os.X_OK)), None) or shutil.which("bash")


@lru_cache(maxsize=1)
def _parser() -> Any:
    import tree_sitter_bash  # imported here: only a decision about a command needs the parser
    from tree_sitter import Language, Parser

    return Parser(Language(tree_sitter_bash.language()))


def analyse(command: str) -> Analysis:
    """Every simple command and redirection in `command`, or the problems that stop us knowing.
    The result is shared (cached): callers read it, never change it."""
    if len(command) > 4_096:  # a cache of big strings would hold megabytes an attacker chose
        return _analyse(command, 0)
    return _analyse_cached(command)


@lru_cache(maxsize=2048)
def _analyse_cached(command: str) -> Analysis:
    return _analyse(command, 0)


def _analyse(command: str, depth: int) -> Analysis:
    result = Analysis()
    if len(command) > MAX_COMMAND_CHARS:
        result.problems.append(f"the command is {len(command):,} characters long (over {MAX_COMMAND_CHARS:,}, "
                               "not parsed)")
        return result
    if depth > MAX_DEPTH:
        result.problems.append(f"shell strings nested more than {MAX_DEPTH} deep")
        return result
    if "\x00" in command:
        result.problems.append("a NUL character")
        return result
    # bash drops backslash-newline before it splits words (`r\<newline>m` is `rm`); tree-sitter splits there.
    command = _CONTINUATION.sub(r"\1", command)
    tree = _parser().parse(command.encode("utf-8", "surrogatepass"))
    if tree.root_node.has_error:
        result.problems.append("a syntax error, or a construct it cannot read")
        return result
    walker = _Walker(result, depth)
    walker.visit(tree.root_node, 0)
    if len(result.commands) > MAX_COMMANDS:
        result.problems.append(f"more than {MAX_COMMANDS:,} simple commands")
    return result


_CONTINUATION = re.compile(r"(?<!\\)((?:\\\\)*)\\\n")


# -- words ------------------------------------------------------------------------------------------------
_DQ_ESCAPE = re.compile(r"\\([\\$`\"\n])")
_WORD_ESCAPE = re.compile(r"\\(.)", re.S)
_ANSI = re.compile(r"\\(x[0-9a-fA-F]{1,2}|u[0-9a-fA-F]{1,4}|U[0-9a-fA-F]{1,8}|[0-7]{1,3}|c.|.)", re.S)
_ANSI_SIMPLE = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f",
                "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?"}


def _ansi_c(body: str) -> str:
    def one(match: re.Match[str]) -> str:
        code = match[1]
        if code[0] in "xuU":
            return chr(int(code[1:], 16)) if int(code[1:], 16) < 0x110000 else ""
        if code[0].isdigit():
            return chr(int(code, 8) & 0xFF)
        if code[0] == "c":
            return chr(ord(code[1].upper()) ^ 0x40)
        return _ANSI_SIMPLE.get(code, "\\" + code)
    return _ANSI.sub(one, body)


def _text(node: Any) -> str:
    return node.text.decode("utf-8", "surrogatepass")


def word_value(node: Any) -> tuple[str, bool]:
    """What bash makes of one word after quote removal, and whether that is known before it runs."""
    kind = node.type
    text = _text(node)
    if kind == "word":
        return _WORD_ESCAPE.sub(lambda m: "" if m[1] == "\n" else m[1], text), True
    if kind == "number":
        return text, True
    if kind == "raw_string":
        return text[1:-1], True
    if kind == "ansi_c_string":
        return _ansi_c(text[2:-1]), True
    if kind in ("string", "translated_string"):
        parts, literal = [], True
        for child in node.named_children:
            if child.type == "string_content":
                parts.append(_DQ_ESCAPE.sub(lambda m: "" if m[1] == "\n" else m[1], _text(child)))
            elif child.type == "string":
                value, ok = word_value(child)
                parts.append(value)
                literal = literal and ok
            else:
                parts.append(_text(child))
                literal = False
        return "".join(parts), literal
    if kind == "concatenation":
        parts, literal = [], True
        children = node.named_children
        if any(c.type == "word" and _text(c) == "{" for c in children):
            literal = False  # brace expansion: `--p{re,x}` becomes two words bash makes up
        for child in children:
            value, ok = word_value(child)
            parts.append(value)
            literal = literal and ok
        return "".join(parts), literal
    return text, False  # expansions, substitutions, brace expressions: known only when it runs


# -- the walk ---------------------------------------------------------------------------------------------
class _Walker:
    def __init__(self, result: Analysis, depth: int) -> None:
        self.result = result
        self.depth = depth
        self.cwds: tuple[str | None, ...] = ("",)
        # What the command being walked reads on standard input: a script a shell would run from it, when
        # a here-document or here-string shows it ("text"), a file ("file"), else nothing visible (None).
        self.stdin: tuple[Literal["text", "file", "unknown"], str] | None = None

    def problem(self, text: str) -> None:
        if text not in self.result.problems:
            self.result.problems.append(text)

    def visit(self, node: Any, level: int, extra_args: list[Any] | None = None) -> None:
        if level > MAX_NESTING:
            self.problem(f"nesting deeper than {MAX_NESTING}")
            return
        if len(self.result.commands) > MAX_COMMANDS:
            return
        kind = node.type
        if not node.is_named:
            return
        if kind == "command":
            self.command(node, level, extra_args or [])
            return
        if kind == "declaration_command" or kind == "unset_command":
            self.declaration(node, level)
            return
        if kind == "redirected_statement":
            self.redirected(node, level)
            return
        if kind == "file_redirect":
            self.redirect(node, level)
            return
        if kind == "heredoc_redirect":
            outer, self.stdin = self.stdin, None  # `cat <<EOF | sh`: tree-sitter puts the pipeline in here
            self.heredoc(node, level)
            self.stdin = outer
            return
        if kind == "pipeline":
            self.pipeline(node, level)
            return
        self.misread(node, kind)
        if evaluated := _evaluates(node, kind):
            self.problem(evaluated)
        if kind == "variable_assignment":
            name = node.child_by_field_name("name")
            if name is not None and DANGEROUS_VARIABLES.match(_text(name)):
                self.problem(f"it sets {_text(name)}, which changes what later commands run")
        elif kind not in _STRUCTURAL:
            self.problem(f"a shell construct the policy does not know ({kind})")
            return
        for child in node.named_children:
            self.visit(child, level + 1)

    def pipeline(self, node: Any, level: int) -> None:
        """Only the first command of `a | b` reads the pipeline's input; the others read the pipe before them."""
        outer = self.stdin
        for index, child in enumerate(node.named_children):
            self.stdin = outer if index == 0 else None
            self.visit(child, level + 1)
        self.stdin = outer

    def last_reads(self, node: Any, level: int, outer: tuple[Literal["text", "file", "unknown"], str] | None) -> None:
        """A list under a redirection: its last command reads the redirected input, the others the outer one."""
        given, children = self.stdin, node.named_children
        for index, child in enumerate(children):
            self.stdin = given if index == len(children) - 1 else outer
            self.visit(child, level + 1)

    def redirected(self, node: Any, level: int) -> None:
        body = node.child_by_field_name("body")
        extra: list[Any] = []
        for child in node.named_children:
            if child.type == "file_redirect":
                destinations = child.children_by_field_name("destination")
                extra += destinations[1:]  # tree-sitter hands `ls >f x`'s `x` to the redirect; bash gives it to ls
        if extra and (body is None or body.type != "command"):
            self.problem("words after a redirection the parser could not place")
        for child in node.named_children:
            if body is not None and child == body:
                outer, self.stdin = self.stdin, _stdin([c for c in node.named_children if c != body], self.stdin)
                if body.type == "list":  # `a && sh <<EOF`: tree-sitter gives the list the input bash gives sh
                    self.last_reads(body, level + 1, outer)
                else:
                    if body.type != "command" and self.stdin is not None and self.stdin[0] == "text":
                        self.stdin = ("unknown", "")  # in `{ read x; sh; } <<EOF` sh runs only what read left
                    self.visit(child, level + 1, extra)
                self.stdin = outer
            else:
                self.visit(child, level + 1)

    def redirect(self, node: Any, level: int) -> None:
        operator = next((_text(c) for c in node.children if not c.is_named), "")
        destinations = node.children_by_field_name("destination")
        for child in destinations:
            self.visit(child, level + 1)  # `> $(cmd)` runs cmd
        if not destinations:
            return
        target = destinations[0]
        value, literal = word_value(target)
        if operator in (">&", "<&", ">&-", "<&-") and (value.isdigit() or value == "-") and literal:
            return  # `2>&1`, `>&-`: a descriptor, not a file
        kind: Literal["read", "write"] = "read" if operator in ("<", "<&") else "write"
        if operator == "<>":
            kind = "write"
        if literal and value in NOT_FILES:
            return
        self.result.accesses.append(Access(kind, value if literal else None, self.cwds))

    def heredoc(self, node: Any, level: int) -> None:
        start = next((c for c in node.named_children if c.type == "heredoc_start"), None)
        quoted = start is not None and re.search(r"['\"\\]", _text(start)) is not None
        for child in node.named_children:
            if child.type == "heredoc_body" and not quoted:
                parts = [p for p in child.named_children if p.type == "heredoc_content"] or (
                    [child] if not child.named_children else [])
                if any(re.search(r"`|\$\(", _text(part)) for part in parts):
                    self.problem("a here-document whose text runs a command the parser did not read")
            if child.type == "heredoc_body" and quoted:
                continue  # `<<'EOF'`: the text is literal, nothing in it runs
            self.visit(child, level + 1)

    def declaration(self, node: Any, level: int) -> None:
        keyword = next((_text(c) for c in node.children if not c.is_named), node.type)
        words, literal = [keyword], [True]
        for child in node.named_children:
            if child.type == "variable_assignment":
                name = child.child_by_field_name("name")
                if name is not None and DANGEROUS_VARIABLES.match(_text(name)):
                    self.problem(f"it sets {_text(name)}, which changes what later commands run")
                value = child.child_by_field_name("value")
                got, ok = word_value(value) if value is not None else ("", True)
                words.append(f"{_text(name) if name is not None else ''}={got}")
                literal.append(ok)
            else:
                got, ok = word_value(child)
                words.append(got)
                literal.append(ok)
            self.visit(child, level + 1)
        self.emit(words, literal, (), (), (), False)

    def command(self, node: Any, level: int, extra_args: list[Any]) -> None:
        # a here-string on the command itself is its input; what its words run (`$(…)`) reads the outer one
        outer = self.stdin
        stdin, self.stdin = _stdin(node.named_children, outer), None
        try:
            self.simple(node, level, extra_args, stdin)
        finally:
            self.stdin = outer

    def simple(self, node: Any, level: int, extra_args: list[Any],
               stdin: tuple[Literal["text", "file", "unknown"], str] | None) -> None:
        assignments: list[str] = []
        words: list[str] = []
        literal: list[bool] = []
        for child in [*node.named_children, *extra_args]:
            self.visit(child, level + 1)  # substitutions anywhere in the command run too
            if child.type == "variable_assignment":
                name = child.child_by_field_name("name")
                assignments.append(_text(name) if name is not None else "?")
            elif child.type in ("file_redirect", "herestring_redirect", "heredoc_redirect"):
                continue
            elif child.type == "command_name":
                inner = child.named_children
                value, ok = word_value(inner[0]) if len(inner) == 1 else (_text(child), False)
                words.append(value)
                literal.append(ok)
            elif child.type == "comment":
                continue
            else:
                value, ok = word_value(child)
                words.append(value)
                literal.append(ok)
        if not words:
            return  # only assignments (checked above) or redirections
        self.stdin = stdin
        self.unwrap(words, literal, tuple(assignments), (), (), False, self.depth)

    def misread(self, node: Any, kind: str) -> None:
        """Where tree-sitter-bash reads the text otherwise than bash would run it: a problem, so a person decides."""
        if kind == "word" and re.search(r"(?<!\\)\n", _text(node).replace("\\\\", "")):
            # tree-sitter-bash reads `ls\n\\touch x` as one command whose argument is "\n\\touch"; bash runs two
            self.problem("a line the parser joined to the one before it")
        if kind == "command_substitution" and _text(node).startswith("`") and "\\`" in _text(node):
            self.problem("backticks inside backticks")  # tree-sitter reads the inner ones as text; bash runs them

    def unwrap(self, words: list[str], literal: list[bool], assignments: tuple[str, ...], wrappers: tuple[str, ...],
               risks: tuple[str, ...], more_args: bool, depth: int) -> None:
        """Peel wrappers off until the command they run; emit it (and sudo itself, which is a decision)."""
        for _ in range(16):
            if not words:
                return
            if unknowable := _unknowable_name(words[0], literal[0]):
                self.problem(unknowable)
                return
            name = posixpath.basename(words[0])
            if self.script(name, words, literal, assignments, wrappers, risks, depth):
                return
            if name in ("trap", "alias"):  # their strings run later, as commands: judged now
                self.later(name, words, literal, assignments, wrappers, risks, depth)
                break
            if name == "find":
                self.find(words, literal, assignments, wrappers, risks, depth)
                return
            if name not in _WRAPPER_VALUE_OPTIONS:
                break
            if name == "command" and any(w in ("-v", "-V") for w in words[1:2]):
                break  # `command -v x` only looks x up
            index, found_risks, env_names, split_string = _wrapper_options(name, words)
            if name == "xargs":
                more_args = True
            wrapper = " ".join(words[:index])
            if name in ("sudo", "doas"):
                self.emit(words[:index], literal[:index], assignments, wrappers, (*risks, *found_risks), False)
            if split_string is not None:
                self.nested(" ".join([split_string, *words[index:]]), depth, (*assignments, *env_names),
                            (*wrappers, wrapper), (*risks, *found_risks))
                return
            words, literal = words[index:], literal[index:]
            assignments = (*assignments, *env_names)
            wrappers, risks = (*wrappers, wrapper), (*risks, *found_risks)
            if not words:  # a bare `xargs` runs echo, a bare `env` prints; anything else runs nothing more
                stand_in = {"xargs": "echo", "env": "env"}.get(name)
                if stand_in is None:
                    return
                words, literal = [stand_in], [True]
        else:
            self.problem("wrappers nested too deep")
            return
        if name in ("cd", "pushd", "popd"):
            self.change_directory(words, literal)
        self.emit(words, literal, assignments, wrappers, risks, more_args)

    def string_command(self, name: str, words: list[str], literal: list[bool], assignments: tuple[str, ...],
                       wrappers: tuple[str, ...], risks: tuple[str, ...], depth: int) -> None:
        """`eval STRING` and `sh -c STRING`: the string is judged as commands, when the parser can see it."""
        string = " ".join(words[1:]) if name == "eval" else _shell_string(words)
        ok = all(literal[1:]) if name == "eval" else _shell_string_literal(words, literal)
        if not ok or string is None:
            self.problem(f"`{name}` runs a string the parser cannot see before it runs")
            return
        if name not in ("eval", "bash") and re.search(r"\$['\"]", string):
            # dash reads `$'a\' ;touch M'` as `$`, a quoted backslash, then `touch M`: bash's reading is not its own
            self.problem(f"`{name} -c` with `$'…'` or `$\"…\"`, which {name} reads otherwise than bash")
            return
        self.nested(string, depth, assignments, wrappers, risks)

    def script(self, name: str, words: list[str], literal: list[bool], assignments: tuple[str, ...],
               wrappers: tuple[str, ...], risks: tuple[str, ...], depth: int) -> bool:
        """`eval S`, `sh -c S`, and `sh <<EOF`, `bash <<< '…'`, `source /dev/stdin`: the script is judged as
        commands (a problem when the parser cannot see it); False when `name` runs no script we can read."""
        if name in ("eval",) or name in SHELLS and _shell_string(words) is not None:
            self.string_command(name, words, literal, assignments, wrappers, risks, depth)
            return True
        if not _runs_stdin(name, words) or self.stdin is not None and self.stdin[0] == "file":
            return False  # `sh script.sh`, `sh < script.sh`: a file that runs code, judged by the shell's name
        if self.stdin is None or self.stdin[0] != "text":
            self.problem(f"`{name}` reads its commands from standard input, which the parser cannot see")
        else:
            self.nested(self.stdin[1], depth, assignments, wrappers, risks)
        return True

    def later(self, name: str, words: list[str], literal: list[bool], assignments: tuple[str, ...],
              wrappers: tuple[str, ...], risks: tuple[str, ...], depth: int) -> None:
        """`trap` and `alias`: the command strings they keep to run later, judged as commands now."""
        strings = [w.split("=", 1)[1] for w in words[1:] if "=" in w] if name == "alias" else words[1:2]
        for string, ok in zip(strings, literal[1:], strict=False):  # alias: only the name=value words
            if string.startswith("-"):
                continue
            if not ok:
                self.problem(f"`{name}` with a command the parser cannot see")
            else:
                self.nested(string, depth, assignments, (*wrappers, name), risks)

    def find(self, words: list[str], literal: list[bool], assignments: tuple[str, ...], wrappers: tuple[str, ...],
             risks: tuple[str, ...], depth: int) -> None:
        """`find` is judged with its own options; what its -exec/-ok run is judged as a command too."""
        self.emit(words, literal, assignments, wrappers, risks, False)
        index = 1
        while index < len(words):
            if words[index] in _FIND_EXEC:
                end = index + 1
                while end < len(words) and words[end] not in (";", "+"):
                    end += 1
                inner, inner_literal = words[index + 1:end], literal[index + 1:end]
                if inner:
                    self.unwrap(list(inner), list(inner_literal), assignments, (*wrappers, f"find … {words[index]}"),
                                risks, True, depth)
                index = end
            index += 1

    def nested(self, string: str, depth: int, assignments: tuple[str, ...], wrappers: tuple[str, ...],
               risks: tuple[str, ...]) -> None:
        inner = _analyse(string, depth + 1)
        for problem in inner.problems:
            self.problem(problem)
        for command in inner.commands:
            self.result.commands.append(SimpleCommand(
                command.words, command.literal, (*wrappers, *command.wrappers), (*assignments, *command.assignments),
                (*risks, *command.risks), command.more_args, self.cwds if command.cwds == ("",) else
                tuple(dict.fromkeys((*self.cwds, *command.cwds)))))
        for access in inner.accesses:
            cwds = tuple(dict.fromkeys((*self.cwds, *access.cwds)))
            self.result.accesses.append(Access(access.kind, access.path, cwds))

    def change_directory(self, words: list[str], literal: list[bool]) -> None:
        """Relative paths after a `cd` may resolve in either place (a subshell's cd does not last)."""
        args = [(w, ok) for w, ok in zip(words[1:], literal[1:], strict=True) if not w.startswith("-") or w == "-"]
        if posixpath.basename(words[0]) == "popd" or not args:
            where: str | None = None if posixpath.basename(words[0]) == "popd" else "~"
        else:
            target, ok = args[0]
            where = None if not ok or target == "-" else target
        moved = [where if where is None or where.startswith(("/", "~")) or cwd is None
                 else (posixpath.join(cwd, where) if cwd else where) for cwd in self.cwds]
        self.cwds = tuple(dict.fromkeys((*self.cwds, *moved)))[:8]

    def emit(self, words: list[str], literal: list[bool], assignments: tuple[str, ...], wrappers: tuple[str, ...],
             risks: tuple[str, ...], more_args: bool) -> None:
        if words and (evaluated := _builtin_problem(words, literal)):
            self.problem(evaluated)
        if words:
            self.result.commands.append(SimpleCommand(tuple(words), tuple(literal), wrappers, assignments, risks,
                                                      more_args, self.cwds))


_ARITHMETIC_TESTS = {"-eq", "-ne", "-lt", "-le", "-gt", "-ge"}
_NAME_TESTS = {"-v", "-R"}  # their operand is a variable name, `a[i]` included: the subscript is evaluated
# An integer constant bash's arithmetic reads without looking up anything: 12, 0x1f, 2#101.
_INTEGER = re.compile(r"\A(?:0[xX][0-9a-fA-F]+|[0-9]+#[0-9A-Za-z@_]+|[0-9]+)\Z")
_PLAIN_NAME = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*\Z")
# `name[index]` as a word: what unset, read, printf -v, test -v, declare take as a variable (the index is evaluated).
_SUBSCRIPTED = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*\[(?P<index>.*)\](?:[+]?=.*)?\Z", re.S)
_NAME_BUILTINS = {"unset", "read", "printf", "test", "[", "declare", "typeset", "local", "export", "readonly",
                  "getopts", "wait", "mapfile", "readarray", "let"}
_EVALUATED = "is evaluated as arithmetic, where a value such as `a[$(cmd)]` runs cmd"


def _leaves(node: Any, skip: frozenset[str] = frozenset({"do_group", "test_operator"})) -> list[Any]:
    """The named nodes under `node` that hold no others (an arithmetic expression's operands)."""
    out: list[Any] = []
    stack = [c for c in node.named_children if c.type not in skip]
    while stack and len(out) < 10_000:
        child = stack.pop()
        if child.named_children:
            stack.extend(c for c in child.named_children if c.type not in skip)
        else:
            out.append(child)
    return out


def _non_literal(node: Any) -> str | None:
    """The first operand under `node` that is not an integer constant, as written; None when all are."""
    leaves = _leaves(node) if node.named_children else [node]
    return next((_text(leaf) for leaf in leaves if not _INTEGER.match(_text(leaf))), None)


def _evaluates(node: Any, kind: str) -> str | None:
    """Why bash would evaluate text of unknown value as code at `node`, if it would (C6, issue 33)."""
    if kind == "expansion":
        return _expansion_problem(node)
    if kind == "subscript" and (node.parent is None or node.parent.type != "expansion"):
        index = node.child_by_field_name("index")
        if index is not None and _non_literal(index) is not None:
            return f"the subscript in `{short(_text(node), 60)}` {_EVALUATED}"
        return None
    if kind == "array":
        for element in node.named_children:
            match = re.match(r"\[(.*?)\]\+?=", _text(element), re.S)
            if match and not _INTEGER.match(match[1]):
                return f"the subscript in `{short(_text(element), 60)}` {_EVALUATED}"
        return None
    if kind == "test_command":
        return _test_problem(node)
    if kind == "c_style_for_statement" or kind == "arithmetic_expansion" or (
            kind == "compound_statement" and node.children and node.children[0].type == "(("):
        if (operand := _non_literal(node)) is not None:
            return f"`{short(operand, 40)}` in `{short(_text(node), 60)}` {_EVALUATED}"
    return None


def _expansion_problem(node: Any) -> str | None:
    """`${name}` and `${@}`, `${#}`… are plain values; any operator, subscript or indirection is not."""
    inner = [c for c in node.children if c.type not in ("${", "}")]
    if len(inner) == 1 and inner[0].type in ("variable_name", "special_variable_name", "#", "!", "@", "*", "?",
                                             "$", "-", "_", "0"):
        return None  # tree-sitter reads `${#}` and `${!}` as operators; bash as the parameters $# and $!
    form = f"`{short(_text(node), 60)}`"
    types = [c.type for c in inner]
    if types and types[0] == "!":
        return f"{form} is an indirection: it expands the variable another one names, where `a[$(cmd)]` runs cmd"
    if "@" in types[1:] and types.index("@") + 1 < len(types) and _text(inner[types.index("@") + 1]) == "P":
        return f"{form} expands a prompt string, which can run commands"
    if "subscript" in types:
        return f"the subscript in {form} {_EVALUATED}"
    if ":" in types:
        return f"the offset or length in {form} {_EVALUATED}"
    return f"{form} is an expansion with an operator; only `$name` and `${{name}}` are read as plain values"


def _test_problem(node: Any) -> str | None:
    """`[[ x -eq 1 ]]` evaluates both sides as arithmetic, `[[ -v a[i] ]]` the subscript."""
    for child in [node, *_descendants(node)]:
        operator = child.child_by_field_name("operator")
        if operator is None:
            operator = next((c for c in child.children if c.type == "test_operator"), None)
        if operator is None:
            continue
        if _text(operator) in _ARITHMETIC_TESTS and child.type == "binary_expression":
            if (operand := _non_literal(child)) is not None:
                return f"`{short(operand, 40)}` in `[[ … {_text(operator)} … ]]` {_EVALUATED}"
        if _text(operator) in _NAME_TESTS and child.type == "unary_expression":
            operand = next((c for c in child.named_children if c is not operator and c.type != "test_operator"), None)
            value, literal = word_value(operand) if operand is not None else ("", True)
            if not literal or not _PLAIN_NAME.match(value):
                return f"the subscript in `[[ {_text(operator)} {short(value, 40)} ]]` {_EVALUATED}"
    return None


def _names_something(expression: str) -> bool:
    """Whether an arithmetic expression holds anything but integer constants and operators (a name, `$`, `[`)."""
    return re.search(r"[A-Za-z_$`\[]", re.sub(r"0[xX][0-9a-fA-F]+|[0-9]+#[0-9A-Za-z@_]+", "", expression)) is not None


def _builtin_problem(words: list[str], literal: list[bool]) -> str | None:
    """A builtin that takes variable names (`unset a[i]`, `read a[i]`, `declare -i`) or arithmetic (`let`)."""
    name = words[0]
    if name not in _NAME_BUILTINS:
        return None
    if name == "let":
        bad = next((w for w, ok in zip(words[1:], literal[1:], strict=True) if not ok or _names_something(w)), None)
        return None if bad is None else f"the expression in `let {short(bad, 40)}` {_EVALUATED}"
    if name in ("declare", "typeset", "local", "export", "readonly") and any(
            re.fullmatch(r"-[A-Za-z]*i[A-Za-z]*", w) for w in words[1:]):
        return f"`{name} -i` gives a variable the integer attribute: every value it is set to later {_EVALUATED}"
    for word, ok in zip(words[1:], literal[1:], strict=True):
        match = _SUBSCRIPTED.match(word)
        if not ok and "[" in word or match and not _INTEGER.match(match["index"]) and match["index"] not in "@*":
            return f"the subscript in `{name} {short(word, 40)}` {_EVALUATED}"
    return None


def _descendants(node: Any, limit: int = 10_000) -> list[Any]:
    out: list[Any] = []
    stack = list(node.named_children)
    while stack and len(out) < limit:
        child = stack.pop()
        out.append(child)
        stack.extend(child.named_children)
    return out


def _unknowable_name(word: str, literal: bool) -> str | None:
    """Why the command name `word` is not known before bash runs it, if it is not."""
    if not literal:
        return f"an expansion in command position ({short(word, 60)})"
    if re.search(r"[*?\[{]", word) or "=" in word and not word.startswith(("/", ".")):
        return f"a command name bash would expand ({short(word, 60)})"
    return None


def _wrapper_options(name: str, words: list[str]) -> tuple[int, list[str], list[str], str | None]:
    """Wrapper `name`'s own options in `words`: where the wrapped command starts, the risky options seen,
    the variables it sets (env, sudo) and an `env -S` string."""
    takes = _WRAPPER_VALUE_OPTIONS[name]
    index, found_risks, env_names = 1, [], []
    split_string: str | None = None
    while index < len(words):
        word = words[index]
        if word == "--":
            index += 1
            break
        if name in ("env", "sudo") and re.fullmatch(r"[A-Za-z_]\w*=.*", word, re.S):
            env_names.append(word.split("=", 1)[0])
            index += 1
            continue
        if not word.startswith("-") or word == "-":
            if name == "env" and word == "-":
                index += 1
                continue
            break
        option = word.split("=", 1)[0]
        short_with_value = len(word) > 2 and word[:2] in takes and not word.startswith("--")
        if option in _WRAPPER_RISKS.get(name, set()) or word[:2] in _WRAPPER_RISKS.get(name, set()):
            found_risks.append(f"{name} {option}")
        if option in ("-S", "--split-string") and name == "env":
            split_string = word.split("=", 1)[1] if "=" in word else (
                word[2:] if short_with_value else (words[index + 1] if index + 1 < len(words) else ""))
        if option in takes and "=" not in word and not short_with_value:
            index += 2
        else:
            index += 1
    if name == "timeout" and index < len(words):
        index += 1  # the duration
    return index, found_risks, env_names, split_string


def _stdin(redirects: list[Any], outer: tuple[Literal["text", "file", "unknown"], str] | None
           ) -> tuple[Literal["text", "file", "unknown"], str] | None:
    """What a command reads on standard input after `redirects` (the last one wins): a here-document's or
    here-string's text when it is known before it runs, a file, or "unknown"; else the input it inherits."""
    found = outer
    for node in redirects:
        if node.type == "herestring_redirect":
            word = next(iter(node.named_children), None)
            value, literal = word_value(word) if word is not None else ("", True)
            found = ("text", value + "\n") if literal else ("unknown", "")
        elif node.type == "heredoc_redirect":
            found = _heredoc_text(node)
        elif node.type == "file_redirect":
            operator = next((_text(c) for c in node.children if not c.is_named), "")
            target = node.child_by_field_name("destination")
            if operator in ("<", "<&") and target is not None:
                value, literal = word_value(target)
                fd = value.startswith(("/dev/std", "/dev/fd/", "/proc/")) or operator == "<&"
                found = ("file", value) if literal and not fd else ("unknown", "")
    return found


def _heredoc_text(node: Any) -> tuple[Literal["text", "file", "unknown"], str]:
    """A here-document's text as the command reads it; "unknown" when bash expands something in it first."""
    start = next((c for c in node.named_children if c.type == "heredoc_start"), None)
    body = next((c for c in node.named_children if c.type == "heredoc_body"), None)
    quoted = start is not None and re.search(r"['\"\\]", _text(start)) is not None
    text = _text(body) if body is not None else ""
    if not quoted and (body is not None and any(c.type != "heredoc_content" for c in body.named_children)
                       or re.search(r"[$`\\]", text)):
        return ("unknown", "")
    if any(_text(c) == "<<-" for c in node.children if not c.is_named):
        text = re.sub(r"(?m)^\t+", "", text)  # `<<-` strips leading tabs
    return ("text", text)


def _runs_stdin(name: str, words: list[str]) -> bool:
    """Whether `name words…` runs the script on its standard input: a shell without `-c` and without a script
    file (or with `-s`), and `source /dev/stdin`."""
    if name in ("source", "."):
        return words[1:2] in (["/dev/stdin"], ["/dev/fd/0"], ["/proc/self/fd/0"])
    if name not in SHELLS:
        return False
    index, from_stdin = 1, False
    while index < len(words):
        word = words[index]
        if word in ("--", "-"):
            index += 1
            break
        if word in ("-o", "+o", "-O", "+O", "--rcfile", "--init-file"):
            index += 2
        elif word.startswith(("-", "+")) and len(word) > 1:
            from_stdin = from_stdin or word[0] == "-" and not word.startswith("--") and "s" in word[1:]
            index += 1
        else:
            break
    return from_stdin or index >= len(words)


def _shell_string(words: list[str]) -> str | None:
    """The string `bash -c STRING` (also `-lc`, `-ec`, `-o pipefail -c`) runs; None when it runs a file or stdin."""
    index, has_c = 1, False
    while index < len(words):
        word = words[index]
        if word == "--":
            index += 1
            break
        if word in ("-o", "+o", "-O", "+O"):
            index += 2
            continue
        if word.startswith(("-", "+")) and len(word) > 1 and not word.startswith("--"):
            has_c = has_c or "c" in word[1:]
            index += 1
            continue
        if word.startswith("--"):
            index += 1
            continue
        break
    if not has_c:
        return None
    return words[index] if index < len(words) else ""


def _shell_string_literal(words: list[str], literal: list[bool]) -> bool:
    string = _shell_string(words)
    return string is not None and (string == "" or literal[len(words) - 1 - words[::-1].index(string)]
                                   and all(ok for w, ok in zip(words, literal, strict=True) if w == string))
