"""`tshell completion bash`: a bash completion script generated from tshell's own parser.

Why this exists: argparse offers no completion of its own, and the usual add-ons
either call back into Python on every Tab (argcomplete: about a second here,
because the command modules import on start) or are one more dependency
(shtab). tshell's commands are a fixed tree, so the script is generated from
the real parser once, as static tables: for each command path its
subcommands, its options, which options take a value, and the choices of
options and positionals. Tab then costs no Python at all, and the script can
never disagree with the parser it was made from.

    source <(tshell completion bash)        # or save it under bash-completion's completions/
"""

from __future__ import annotations

import argparse
import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TextIO

from tshell.cli import build_parser
from tshell.command import set_command

if TYPE_CHECKING:
    from tshell.command import Subparsers
from tshell.exitcodes import ExitCode

PROG = "tshell"


class Shell(enum.StrEnum):
    BASH = "bash"


@dataclass
class CommandTable:
    """What one command path (`tshell`, `tshell tenants`, `tshell tenants apply`) accepts."""

    subcommands: list[str] = field(default_factory=list)
    options: list[str] = field(default_factory=list)
    valued_options: list[str] = field(default_factory=list)
    option_choices: dict[str, list[str]] = field(default_factory=dict)
    positional_choices: dict[int, list[str]] = field(default_factory=dict)


def collect_tables(parser: argparse.ArgumentParser, path: str = PROG) -> dict[str, CommandTable]:
    """The completion tables of parser and every subparser, keyed by command path."""
    table = CommandTable()
    tables = {path: table}
    position = 0
    for action in parser._actions:  # argparse keeps no public list of its actions
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                table.subcommands.append(name)
                tables |= collect_tables(sub, f"{path} {name}")
            continue
        choices = [str(choice) for choice in action.choices or []]
        if action.option_strings:
            table.options += action.option_strings
            if action.nargs != 0:
                table.valued_options += action.option_strings
                for option in action.option_strings:
                    if choices:
                        table.option_choices[option] = choices
        else:
            if choices:
                table.positional_choices[position] = choices
            position += 1
    return tables


def _words(items: list[str]) -> str:
    return " ".join(items)


def _assoc(name: str, entries: dict[str, str]) -> str:
    body = "".join(f"\n    [{_quote(key)}]={_quote(value)}" for key, value in entries.items())
    return f"typeset -gA {name}\n{name}=({body}\n)"


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def render_tables(tables: dict[str, CommandTable]) -> str:
    """The tables as bash associative arrays."""
    subs = {path: _words(t.subcommands) for path, t in tables.items()}
    opts = {path: _words(t.options) for path, t in tables.items()}
    valued = {path: _words(t.valued_options) for path, t in tables.items()}
    choices = {
        f"{path}|{option}": _words(values)
        for path, t in tables.items()
        for option, values in t.option_choices.items()
    }
    choices |= {
        f"{path}#{index}": _words(values)
        for path, t in tables.items()
        for index, values in t.positional_choices.items()
    }
    return "\n".join(
        _assoc(name, entries)
        for name, entries in (
            ("_tshell_subs", subs),
            ("_tshell_opts", opts),
            ("_tshell_valued", valued),
            ("_tshell_choices", choices),
        )
    )


# The word walk is the same in both shells: descend into a subcommand when a word
# names one, skip the value after an option that takes one, count the positionals.
BASH_FUNCTION = r"""
_tshell() {
    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"
    local cmdpath=tshell npos=0 skip=0 i w
    for ((i = 1; i < COMP_CWORD; i++)); do
        w="${COMP_WORDS[i]}"
        if ((skip)); then skip=0; continue; fi
        if [[ "$w" == -* ]]; then
            [[ "$w" != *=* && " ${_tshell_valued[$cmdpath]} " == *" $w "* ]] && skip=1
            continue
        fi
        if [[ " ${_tshell_subs[$cmdpath]} " == *" $w "* ]]; then
            cmdpath="$cmdpath $w"; npos=0
        else
            npos=$((npos + 1))
        fi
    done
    COMPREPLY=()
    if ((skip)); then
        if [[ -n "${_tshell_choices[$cmdpath|$prev]}" ]]; then
            COMPREPLY=($(compgen -W "${_tshell_choices[$cmdpath|$prev]}" -- "$cur"))
        else
            COMPREPLY=($(compgen -f -- "$cur"))
        fi
    elif [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "${_tshell_opts[$cmdpath]}" -- "$cur"))
    elif [[ -n "${_tshell_subs[$cmdpath]}" ]]; then
        COMPREPLY=($(compgen -W "${_tshell_subs[$cmdpath]}" -- "$cur"))
    elif [[ -n "${_tshell_choices[$cmdpath#$npos]}" ]]; then
        COMPREPLY=($(compgen -W "${_tshell_choices[$cmdpath#$npos]}" -- "$cur"))
    else
        COMPREPLY=($(compgen -f -- "$cur"))
    fi
}
complete -o filenames -F _tshell tshell
"""


def render_script(parser: argparse.ArgumentParser, shell: Shell) -> str:
    """The completion script for shell, made from parser."""
    header = f"# {shell} completion for {PROG}, generated by `{PROG} completion {shell}`.\n"
    return header + render_tables(collect_tables(parser)) + "\n" + BASH_FUNCTION


def print_completion(args: argparse.Namespace, out: TextIO) -> ExitCode:
    out.write(render_script(build_parser(), Shell(args.shell)))
    return ExitCode.OK


def register(subparsers: Subparsers) -> None:
    completion = subparsers.add_parser(
        "completion",
        help="print a shell completion script (source <(tshell completion bash))",
        description="Print a bash completion script, made from tshell's own parser.",
    )
    completion.add_argument("shell", choices=[s.value for s in Shell])
    set_command(completion, print_completion)
