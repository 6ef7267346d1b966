"""Exec into a hollow pod: a small POSIX-shell subset run inside the API server, no process.

What clients exec into pods is mostly `sh -c 'SCRIPT' ARG...` that writes, moves and reads
files (the ClusterSpec delivery: `printf "%s" "$1" > tmp && mv tmp cluster.json`). This runs
such commands against the pod's simulated filesystem (podfs.py): words with single and double
quotes and backslashes, `$N`/`$@`/`$NAME`/`${NAME}` (in double quotes and bare), `;`, `&&`,
`||`, `>` and `>>`; the commands printf, echo, cat, mv, cp, rm, mkdir, ls, test/[, true,
false, exit, sleep (returns at once: time is simulated), pwd, env, hostname. Anything else
(pipes, subshells, other programs) answers as sh does for a missing program: exit 127. stdin
is not read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from localkube.errors import LocalkubeError
from localkube.hollow import podfs

MAX_OUTPUT_BYTES = 1024 * 1024
OPERATORS = ("&&", "||", ">>", ";", ">", "|", "<", "(", ")", "&")
NAME = r"[A-Za-z_][A-Za-z0-9_]*|[0-9@#?]"
VARIABLE = re.compile(rf"\$(?:\{{({NAME})\}}|({NAME}))")


class ShellSyntaxError(LocalkubeError, ValueError):
    """The script uses what this shell does not understand."""


@dataclass
class Outcome:
    code: int = 0
    stdout: bytearray = field(default_factory=bytearray)
    stderr: bytearray = field(default_factory=bytearray)

    def say(self, text: str, error: bool = False) -> None:
        stream = self.stderr if error else self.stdout
        if len(stream) < MAX_OUTPUT_BYTES:
            stream.extend(text.encode()[: MAX_OUTPUT_BYTES - len(stream)])


@dataclass
class Context:
    root: str
    cwd: str
    env: dict[str, str]
    args: list[str]  # $0, $1, ...
    hostname: str
    last_code: int = 0

    def lookup(self, name: str) -> str:
        if name.isdigit():
            index = int(name)
            return self.args[index] if index < len(self.args) else ""
        if name == "@":
            return " ".join(self.args[1:])
        if name == "#":
            return str(max(0, len(self.args) - 1))
        if name == "?":
            return str(self.last_code)
        return self.env.get(name, "")


def expand(text: str, context: Context) -> str:
    return VARIABLE.sub(lambda m: context.lookup(m.group(1) or m.group(2)), text)


def split_script(script: str) -> list[tuple[str, object]]:
    """Tokens: ("word", parts) with parts [(text, expands)], or ("op", operator). Variables are
    expanded when the command runs (`$?` is the previous command's code)."""
    tokens: list[tuple[str, object]] = []
    word: list[tuple[str, bool]] | None = None
    i, n = 0, len(script)
    while i < n:
        char = script[i]
        if char in " \t\n":
            if word is not None:
                tokens.append(("word", word))
                word = None
            i += 1
            continue
        operator = next((op for op in OPERATORS if script.startswith(op, i)), None)
        if operator:
            if word is not None:
                tokens.append(("word", word))
                word = None
            tokens.append(("op", operator))
            i += len(operator)
            continue
        word = word if word is not None else []
        if char == "'":
            end = script.find("'", i + 1)
            if end < 0:
                raise ShellSyntaxError("Syntax error: Unterminated quoted string")
            word.append((script[i + 1 : end], False))
            i = end + 1
        elif char == '"':
            i += 1
            while i < n and script[i] != '"':
                if script[i] == "\\" and i + 1 < n and script[i + 1] in '"\\$`':
                    word.append((script[i + 1], False))
                    i += 2
                    continue
                end = i
                while end < n and script[end] not in '"\\':
                    end += 1
                end = max(end, i + 1)
                word.append((script[i:end], True))
                i = end
            if i >= n:
                raise ShellSyntaxError("Syntax error: Unterminated quoted string")
            i += 1
        elif char == "\\" and i + 1 < n:
            word.append((script[i + 1], False))
            i += 2
        else:
            end = i
            while (
                end < n
                and script[end] not in " \t\n'\"\\"
                and not any(script.startswith(op, end) for op in OPERATORS)
            ):
                end += 1
            word.append((script[i:end], True))
            i = end
    if word is not None:
        tokens.append(("word", word))
    return tokens


def expand_word(parts: list[tuple[str, bool]], context: Context) -> str:
    return "".join(expand(text, context) if expands else text for text, expands in parts)


def run_script(script: str, context: Context, outcome: Outcome) -> int:
    """Run a script: lists of simple commands joined by ; && ||."""
    try:
        tokens = split_script(script)
    except ShellSyntaxError as error:
        outcome.say(f"sh: 1: {error}\n", error=True)
        return 2
    code, skip = 0, False
    command: list[tuple[str, object]] = []
    for kind, value in tokens + [("op", ";")]:
        if kind == "word" or value in (">", ">>"):
            command.append((kind, value))
            continue
        if value not in (";", "&&", "||"):
            outcome.say(
                f'sh: 1: Syntax error: "{value}" is not supported by a simulated pod\'s shell\n',
                error=True,
            )
            return 2
        if command and not skip:
            code = run_simple(command, context, outcome)
            context.last_code = code
            if isinstance(code, ExitRequest):
                return int(code)
        command = []
        skip = (value == "&&" and code != 0) or (value == "||" and code == 0)
    return code


class ExitRequest(int):
    """The code of an `exit`: the script ends here."""


def run_simple(tokens: list[tuple[str, object]], context: Context, outcome: Outcome) -> int:
    words: list[str] = []
    redirect: tuple[str, str] | None = None
    index = 0
    while index < len(tokens):
        kind, value = tokens[index]
        if kind == "op":
            if index + 1 >= len(tokens) or tokens[index + 1][0] != "word":
                outcome.say("sh: 1: Syntax error: newline unexpected\n", error=True)
                return 2
            redirect = (value, expand_word(tokens[index + 1][1], context))
            index += 2
            continue
        words.append(expand_word(value, context))
        index += 1
    if not words:
        return 0
    target = Outcome() if redirect else outcome
    code = run_argv(words, context, target)
    if redirect:
        outcome.stderr.extend(target.stderr)
        try:
            podfs.write_file(
                context.root,
                context.cwd,
                redirect[1],
                bytes(target.stdout),
                append=redirect[0] == ">>",
            )
        except podfs.PodFsError as error:
            outcome.say(f"sh: 1: {error}\n", error=True)
            return 2
    return code


def run_argv(argv: list[str], context: Context, outcome: Outcome) -> int:
    """Run one command (a builtin of this shell); its exit code."""
    name, args = argv[0], argv[1:]
    program = name.rsplit("/", 1)[-1]
    if program in ("sh", "bash"):
        if len(args) >= 2 and args[0] == "-c":
            inner = Context(
                context.root, context.cwd, context.env, args[2:] or [program], context.hostname
            )
            return int(run_script(args[1], inner, outcome))
        outcome.say(
            f"{program}: only `{program} -c SCRIPT [ARG...]` runs in a simulated pod\n", error=True
        )
        return 2
    builtin = BUILTINS.get(program)
    if builtin is None:
        outcome.say(f"sh: 1: {name}: not found\n", error=True)
        return 127
    try:
        return builtin(args, context, outcome)
    except podfs.PodFsError as error:
        outcome.say(f"{program}: {error}\n", error=True)
        return 1


def format_printf(fmt: str, args: list[str]) -> str:
    fmt = fmt.replace("\\n", "\n").replace("\\t", "\t").replace("\\\\", "\\")
    pieces = re.split(r"(%[sd%])", fmt)
    out, queue = [], list(args)
    while True:
        for piece in pieces:
            if piece == "%%":
                out.append("%")
            elif piece in ("%s", "%d"):
                value = queue.pop(0) if queue else ""
                out.append(value if piece == "%s" else str(int(value or 0)))
            else:
                out.append(piece)
        if not queue or not any(p in ("%s", "%d") for p in pieces):
            return "".join(out)


def builtin_printf(args, context, outcome):
    if not args:
        outcome.say("printf: usage: printf format [arg ...]\n", error=True)
        return 2
    try:
        outcome.say(format_printf(args[0], args[1:]))
    except ValueError as error:
        outcome.say(f"printf: {error}\n", error=True)
        return 1
    return 0


def builtin_echo(args, context, outcome):
    newline = not (args and args[0] == "-n")
    outcome.say(" ".join(args[0 if newline else 1 :]) + ("\n" if newline else ""))
    return 0


def builtin_cat(args, context, outcome):
    code = 0
    for path in args:
        try:
            outcome.stdout.extend(podfs.read_file(context.root, context.cwd, path))
        except podfs.PodFsError as error:
            outcome.say(f"cat: {error}\n", error=True)
            code = 1
    return code


def builtin_mv(args, context, outcome):
    paths = [a for a in args if not a.startswith("-")]
    if len(paths) != 2:
        outcome.say("mv: a source and a destination are required\n", error=True)
        return 1
    podfs.move(context.root, context.cwd, paths[0], paths[1])
    return 0


def builtin_cp(args, context, outcome):
    paths = [a for a in args if not a.startswith("-")]
    if len(paths) != 2:
        outcome.say("cp: a source and a destination are required\n", error=True)
        return 1
    data = podfs.read_file(context.root, context.cwd, paths[0])
    podfs.write_file(context.root, context.cwd, paths[1], data)
    return 0


def builtin_rm(args, context, outcome):
    flags = "".join(a[1:] for a in args if a.startswith("-"))
    code = 0
    for path in (a for a in args if not a.startswith("-")):
        try:
            podfs.remove(context.root, context.cwd, path, "r" in flags or "R" in flags)
        except podfs.PodFsError as error:
            if "f" not in flags or "No such file" not in str(error):
                outcome.say(f"rm: {error}\n", error=True)
                code = 1
    return code


def builtin_mkdir(args, context, outcome):
    parents = "-p" in args
    for path in (a for a in args if not a.startswith("-")):
        podfs.make_directory(context.root, context.cwd, path, parents)
    return 0


def builtin_ls(args, context, outcome):
    for path in [a for a in args if not a.startswith("-")] or ["."]:
        names = podfs.list_directory(context.root, context.cwd, path)
        outcome.say("".join(f"{name}\n" for name in names))
    return 0


def builtin_test(args, context, outcome):
    if args and args[-1] == "]":
        args = args[:-1]
    if len(args) == 2 and args[0] in ("-e", "-f", "-d", "-s"):
        return 0 if podfs.check_path(context.root, context.cwd, args[0], args[1]) else 1
    if len(args) == 2 and args[0] in ("-n", "-z"):
        return 0 if bool(args[1]) == (args[0] == "-n") else 1
    if len(args) == 3 and args[1] in ("=", "!="):
        return 0 if (args[0] == args[2]) == (args[1] == "=") else 1
    if len(args) == 1:
        return 0 if args[0] else 1
    outcome.say(f"test: {' '.join(args)}: not supported by a simulated pod's shell\n", error=True)
    return 2


def builtin_exit(args, context, outcome):
    try:
        return ExitRequest(int(args[0]) & 0xFF if args else context.last_code)
    except ValueError:
        outcome.say(f"sh: 1: exit: Illegal number: {args[0]}\n", error=True)
        return ExitRequest(2)


BUILTINS = {
    "printf": builtin_printf,
    "echo": builtin_echo,
    "cat": builtin_cat,
    "mv": builtin_mv,
    "cp": builtin_cp,
    "rm": builtin_rm,
    "mkdir": builtin_mkdir,
    "ls": builtin_ls,
    "test": builtin_test,
    "[": builtin_test,
    "true": lambda args, context, outcome: 0,
    "false": lambda args, context, outcome: 1,
    "sleep": lambda args, context, outcome: 0,
    "exit": builtin_exit,
    "pwd": lambda args, context, outcome: outcome.say(context.cwd + "\n") or 0,
    "hostname": lambda args, context, outcome: outcome.say(context.hostname + "\n") or 0,
    "env": lambda args, context, outcome: (
        outcome.say("".join(f"{k}={v}\n" for k, v in sorted(context.env.items()))) or 0
    ),
}


def run_command(
    root: str, command: list[str], env: dict[str, str], cwd: str, hostname: str
) -> Outcome:
    """Run an exec's command in the pod whose simulated root is `root`."""
    outcome = Outcome()
    context = Context(root, cwd or "/", dict(env), [command[0]], hostname)
    outcome.code = int(run_argv(command, context, outcome))
    return outcome
