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
never make a program, nor hide a redirection written around them.
"""
import shlex
from collections.abc import Mapping, Sequence
from typing import Optional

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


def shell_writes(text: str) -> bool:
    """A command given as one string for the shell (UNKNOWN where an expression goes)."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:  # unbalanced quotes: not a command ddpify can read
        return False
    part: list[str] = []
    for index, token in enumerate(tokens):
        if token in _SEPARATORS:
            if part and _program_writes(part[0], part[1:]):
                return True
            part = []
            continue
        if token in _REDIRECTIONS:  # (`2> err.log` reads as `2`, `>`, `err.log`; `2>&1` as `>&`)
            target = tokens[index + 1] if index + 1 < len(tokens) else ""
            if target and target != "/dev/null" and not target.startswith("&") and target not in _SEPARATORS:
                return True
        part.append(token)
    return bool(part) and _program_writes(part[0], part[1:])


def _program_writes(program: str, arguments: Sequence[str]) -> bool:
    while "=" in program and not program.startswith("=") or program in PREFIXES:  # `LANG=C cp`, `sudo cp`
        if not arguments:
            return False
        program, arguments = arguments[0], arguments[1:]
    name = program.rsplit("/", 1)[-1]
    if name in MUTATING_PROGRAMS:
        return True
    options = MUTATING_OPTIONS.get(name, frozenset())
    # (`--output=file`; sed's `-i.bak` keeps a backup and edits in place too)
    return any(argument.split("=", 1)[0] in options or name == "sed" and argument.startswith("-i")
               for argument in arguments)


def writing_commands(calls_named: Mapping[str, Sequence[cst.Call]]) -> list[cst.Call]:
    """The calls of this file that run a command ddpify reads as a file write, in order of
    their runner's name."""
    return [call for runner in sorted(RUNNERS) for call in calls_named.get(runner, ())
            if _call_writes(call, runner)]


def _call_writes(call: cst.Call, runner: str) -> bool:
    command = argument_for(call, "command" if runner == "os.system" else "args", 0)
    if isinstance(command, (cst.List, cst.Tuple)):
        return command_writes([string_value(element.value) if not isinstance(element, cst.StarredElement) else None
                               for element in command.elements])
    text = _literal_text(command)
    if text is None:
        return False
    shell = argument_for(call, "shell", None)
    through_shell = runner in ("os.system", "subprocess.getoutput", "subprocess.getstatusoutput") or (
        isinstance(shell, cst.Name) and shell.value == "True")
    return shell_writes(text) if through_shell else command_writes([text])


def _literal_text(command: Optional[cst.BaseExpression]) -> Optional[str]:
    """A command string's text, UNKNOWN for each expression of an f-string."""
    if isinstance(command, cst.FormattedString):
        return "".join(part.value if isinstance(part, cst.FormattedStringText) else UNKNOWN for part in command.parts)
    if isinstance(command, cst.ConcatenatedString):
        left, right = _literal_text(command.left), _literal_text(command.right)
        return None if left is None or right is None else left + right
    return string_value(command) if command is not None else None
