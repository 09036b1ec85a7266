"""Shell commands that write files: `os.system("nvidia-smi > runs/gpu.txt")`,
`subprocess.run("git diff > run/patch.diff", shell=True)`, `subprocess.call(["cp", src, dst])`.

Rule: a command run from the script is a file write when ddpify can read, in the literal text
of the command, an output redirection to a file (`>`, `>>`, `2>`, `&>`; not to /dev/null, not
`2>&1`) or, as the program of one of its parts (between `;`, `&&`, `||`, `|`), a program
known to change files: it copies, moves, removes, makes folders or archives, or downloads to
a file (`wget`, `curl -o`), `sed -i`, `tee`. Such a command run on every rank races on the
same file (or the second rank finds it already moved or removed), so it is a write like any
other: rank 0 only (DDP302), and a later read waits for it (DDP309). A command whose program
ddpify cannot read (a name, a program it does not know, unbalanced quotes) is not classified
and stays as it was. Expressions inside an f-string are words ddpify does not know: they
never make a program, nor hide a redirection written around them; so are the values put into
a command built with `+`, `%` or `.format` (`'cp main.py ' + out + '/main.py.backup'`,
`'wget %s; unzip %s' % (url, name)`).

A command that fetches or unpacks data (`wget`, `curl -o`, `unzip`, `tar -x`, `gunzip`) is a
download like `download=True` (rules/downloads.py): local rank 0 runs it while the others
wait, then they all read what it left.
"""
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Callable, Optional

import libcst as cst

from ddpify.analysis.nodes import argument_for, string_value

# Functions that run a command: os.system takes a string; subprocess's take a list of words,
# or a string with shell=True.
RUNNERS = frozenset({"os.system", "subprocess.run", "subprocess.call", "subprocess.check_call",
                     "subprocess.check_output", "subprocess.Popen", "subprocess.getoutput",
                     "subprocess.getstatusoutput"})
# Programs that change files whatever their options.
MUTATING_PROGRAMS = frozenset({"cp", "mv", "rm", "rmdir", "mkdir", "touch", "ln", "rsync", "tar", "zip",
                               "unzip", "gzip", "gunzip", "bzip2", "xz", "7z", "wget", "tee", "install",
                               "scp", "truncate"})
# Programs that change files only with one of these options (`curl -o out URL`, `sed -i`).
MUTATING_OPTIONS = {"curl": frozenset({"-o", "-O", "--output", "--remote-name", "--output-dir"}),
                    "sed": frozenset({"-i", "--in-place"})}
# Words that run the next word as the program (`sudo rm -rf x`, `nohup cp a b`).
PREFIXES = frozenset({"sudo", "nohup", "time", "nice", "env", "exec", "command"})
_SEPARATORS = frozenset({";", "&&", "||", "|", "&", "(", ")", "|&"})
_REDIRECTIONS = frozenset({">", ">>", ">|", "&>", "&>>"})
# A word ddpify cannot read (an f-string's expression): never a program, never /dev/null.
UNKNOWN = "\0"


def command_writes(words: Sequence[Optional[str]]) -> bool:
    """A command given as a list of words (None for a word that is not a literal string)."""
    program = words[0] if words else None
    return program is not None and _program_writes(program, [word or UNKNOWN for word in words[1:]])


def command_fetches(words: Sequence[Optional[str]]) -> bool:
    """A command given as a list of words that fetches or unpacks data."""
    program = words[0] if words else None
    return program is not None and _program_fetches(program, [word or UNKNOWN for word in words[1:]])


def shell_writes(text: str) -> bool:
    """A command given as one string for the shell (UNKNOWN where an expression goes)."""
    tokens = _tokens(text)
    if tokens is None:
        return False
    for index, token in enumerate(tokens):
        if token in _REDIRECTIONS:  # (`2> err.log` reads as `2`, `>`, `err.log`; `2>&1` as `>&`)
            target = tokens[index + 1] if index + 1 < len(tokens) else ""
            if target and target != "/dev/null" and not target.startswith("&") and target not in _SEPARATORS:
                return True
    return any(_program_writes(part[0], part[1:]) for part in _parts(tokens))


def shell_fetches(text: str) -> bool:
    """A command given as one string for the shell, one of whose parts fetches or unpacks data."""
    tokens = _tokens(text)
    return tokens is not None and any(_program_fetches(part[0], part[1:]) for part in _parts(tokens))


def _tokens(text: str) -> Optional[list[str]]:
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        return list(lexer)
    except ValueError:  # unbalanced quotes: not a command ddpify can read
        return None


def _parts(tokens: Sequence[str]) -> list[list[str]]:
    """The words of each part of a command line (between `;`, `&&`, `|`...), redirections and
    their targets left out."""
    parts: list[list[str]] = []
    part: list[str] = []
    skip = False
    for token in tokens:
        if token in _SEPARATORS:
            if part:
                parts.append(part)
            part = []
        elif token in _REDIRECTIONS:
            skip = True
        elif skip:
            skip = False
        else:
            part.append(token)
    if part:
        parts.append(part)
    return parts


def _program(program: str, arguments: Sequence[str]) -> tuple[Optional[str], Sequence[str]]:
    """The program a part runs, past `LANG=C` and `sudo`, by its name, with its arguments."""
    while "=" in program and not program.startswith("=") or program in PREFIXES:  # `LANG=C cp`, `sudo cp`
        if not arguments:
            return None, ()
        program, arguments = arguments[0], arguments[1:]
    return program.rsplit("/", 1)[-1], arguments


# Programs that fetch or unpack data whatever their options; curl with an output option,
# tar and 7z told to extract.
FETCHING_PROGRAMS = frozenset({"wget", "unzip", "gunzip", "bunzip2", "unxz"})


def _program_fetches(program: str, arguments: Sequence[str]) -> bool:
    name, arguments = _program(program, arguments)
    if name is None:
        return False
    if name in FETCHING_PROGRAMS:
        return True
    if name == "curl":
        return any(argument.split("=", 1)[0] in MUTATING_OPTIONS["curl"] for argument in arguments)
    if name == "tar":  # `tar -xzf a.tgz`, `tar xf a.tar`, `tar --extract -f a.tar`
        return any(argument in ("--extract", "--get") or re.fullmatch(r"-?[A-Za-z]*x[A-Za-z]*", argument) is not None
                   and (argument.startswith("-") or index == 0) for index, argument in enumerate(arguments))
    if name in ("7z", "7za"):
        return bool(arguments) and arguments[0] in ("x", "e")
    return False


def _program_writes(program: str, arguments: Sequence[str]) -> bool:
    name, arguments = _program(program, arguments)
    if name is None:
        return False
    if name in MUTATING_PROGRAMS:
        return True
    options = MUTATING_OPTIONS.get(name, frozenset())
    # (`--output=file`; sed's `-i.bak` keeps a backup and edits in place too)
    return any(argument.split("=", 1)[0] in options or name == "sed" and argument.startswith("-i")
               for argument in arguments)


def writing_commands(calls_named: Mapping[str, Sequence[cst.Call]]) -> list[cst.Call]:
    """The calls of this file that run a command ddpify reads as a file write, in order of
    their runner's name; not one that fetches or unpacks data (a download: rules/downloads.py)."""
    return [call for runner in sorted(RUNNERS) for call in calls_named.get(runner, ())
            if _call_writes(call, runner) and not call_fetches(call, runner)]


def after_a_download(statement: cst.CSTNode, parents: Mapping[cst.CSTNode, cst.CSTNode],
                     downloads: Sequence[cst.CSTNode]) -> bool:
    """Rule: a command that writes files in the block of a download, after it (`wget URL;
    unzip a.zip`, then `mv folder data/`, `rm a.zip`), finishes that download: it runs where
    the download runs (local rank 0 of each machine, the others waiting), not on rank 0 alone,
    which would leave the other machines without their data."""
    block = parents.get(statement)
    return block is not None and any(
        parents.get(download) is block and _index_in(block, download) < _index_in(block, statement)
        for download in downloads)


def _index_in(block: cst.CSTNode, statement: cst.CSTNode) -> int:
    body = getattr(block, "body", ())
    return next((index for index, child in enumerate(body) if child is statement), -1)


def call_fetches(call: cst.Call, runner: str) -> bool:
    """`os.system("wget %s; unzip %s" % (url, name))`, `subprocess.run(["curl", "-o", path, url])`:
    a call of `runner` whose command fetches or unpacks data."""
    return _call_is(call, runner, command_fetches, shell_fetches)


def _call_writes(call: cst.Call, runner: str) -> bool:
    return _call_is(call, runner, command_writes, shell_writes)


def _call_is(call: cst.Call, runner: str, of_words: Callable[[Sequence[Optional[str]]], bool],
             of_text: Callable[[str], bool]) -> bool:
    command = argument_for(call, "command" if runner == "os.system" else "args", 0)
    if isinstance(command, (cst.List, cst.Tuple)):
        return of_words([string_value(element.value) if not isinstance(element, cst.StarredElement) else None
                         for element in command.elements])
    text = _literal_text(command)
    if text is None:
        return False
    shell = argument_for(call, "shell", None)
    through_shell = runner in ("os.system", "subprocess.getoutput", "subprocess.getstatusoutput") or (
        isinstance(shell, cst.Name) and shell.value == "True")
    return of_text(text) if through_shell else of_words([text])


# A conversion of printf-style formatting (`%s`, `%-8d`, `%(name)s`); `%%` is a percent sign.
_PERCENT_FIELD = re.compile(r"%(\([^)]*\))?[-#0 +]*(\*|\d+)?(\.(\*|\d+))?[diouxXeEfFgGcrsa%]")
# A replacement field of str.format (`{}`, `{0}`, `{name!r:>8}`); `{{` and `}}` are braces.
_FORMAT_FIELD = re.compile(r"\{\{|\}\}|\{[^{}]*\}")


def _literal_text(command: Optional[cst.BaseExpression]) -> Optional[str]:
    """A command string's text, UNKNOWN for each value put into it: an f-string's
    expressions, what `+` adds to a string, `%` and `.format` fill in. None when no part of
    it is a literal string."""
    if isinstance(command, cst.FormattedString):
        return "".join(part.value if isinstance(part, cst.FormattedStringText) else UNKNOWN for part in command.parts)
    if isinstance(command, cst.ConcatenatedString):
        left, right = _literal_text(command.left), _literal_text(command.right)
        return None if left is None or right is None else left + right
    if isinstance(command, cst.BinaryOperation) and isinstance(command.operator, cst.Add):
        left, right = _literal_text(command.left), _literal_text(command.right)
        return None if left is None and right is None else (left or UNKNOWN) + (right or UNKNOWN)
    if isinstance(command, cst.BinaryOperation) and isinstance(command.operator, cst.Modulo):
        template = _literal_text(command.left)
        return None if template is None else _PERCENT_FIELD.sub(
            lambda field: "%" if field.group(0) == "%%" else UNKNOWN, template)
    if isinstance(command, cst.Call) and isinstance(command.func, cst.Attribute) \
            and command.func.attr.value == "format":
        template = _literal_text(command.func.value)
        return None if template is None else _FORMAT_FIELD.sub(
            lambda field: field.group(0)[0] if field.group(0) in ("{{", "}}") else UNKNOWN, template)
    return string_value(command) if command is not None else None
