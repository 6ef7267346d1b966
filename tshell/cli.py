"""The tshell argument parser, built from one tuple of command modules.

To add commands, write a module with `register(subparsers)` that adds its
subparsers and sets each one's handler with `tshell.command.set_command`, then
add the module's name to COMMAND_MODULES; `run` dispatches every command
through `tshell.command.run_command` (its errors, its exit code). Modules are
imported when the parser is built, so a command's heavy imports (boto3, the
Airflow client) belong inside its functions to keep `tshell --help` fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from tshell.command import run_command
from tshell.exitcodes import ExitCode

COMMAND_MODULES: tuple[str, ...] = (
    "tshell.pack_commands",
    "tshell.runs.submit",
    "tshell.kubeflow_commands",
    "tshell.runs.status",
    "tshell.runs.commands",
    "tshell.runs.logs",
    "tshell.runs.cancel",
    "tshell.runs.tensorboard",
    "tshell.tenant_commands",
    "tshell.completion",
)


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
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return int(ExitCode.INVALID_REQUEST)
    return int(run_command(args, sys.stdout))
