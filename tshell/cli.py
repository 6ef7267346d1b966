"""The tshell argument parser, built from one tuple of command modules.

To add commands, write a module with `register(subparsers)` that adds its
subparsers and sets `func=<callable(args) -> int>` on each (via
`set_defaults`), then add the module's name to COMMAND_MODULES. Modules are
imported when the parser is built, so a command's heavy imports (boto3, the
Airflow client) belong inside its functions to keep `tshell --help` fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys

COMMAND_MODULES: tuple[str, ...] = (
    "tshell.pack_commands",
    "tshell.runs.submit",
    "tshell.runs.status",
    "tshell.runs.commands",
    "tshell.runs.logs",
    "tshell.runs.cancel",
    "tshell.tenant_commands",
    "tshell.completion",
)

EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tshell", description="TF-on-K8s: bundles and training runs."
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def run(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return int(func(args))
    except KeyboardInterrupt:
        print("tshell: interrupted", file=sys.stderr)
        return 130
