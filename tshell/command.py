"""What every tshell command stands on: how it is set on its parser, the session it
opens, and how what it raises ends (one line on stderr and an exit code).

Why this exists: pack, upload, push, the run commands and tenants are one
CLI; a person and a script should meet the same rules whichever one they run.
A command is a handler `(args, out) -> ExitCode` set with `set_command`;
tshell/cli.py's dispatch runs it through `run_command`, which maps:

    CommandError           its own code (the message is the command's own)
    ConfigError            CONFIG_ERROR
    AirflowNotFoundError   NOT_FOUND
    AirflowClientError     AIRFLOW_ERROR
    KeyboardInterrupt      INTERRUPTED, "tshell: interrupted"

Each family of commands keeps the prefix its messages have always had
("error: " for the run commands, "tshell: " for pack, upload and push,
"tshell tenants: " for tenants).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple, TextIO

from tshell.airflow_client import AirflowClientError, AirflowNotFoundError, AirflowSession
from tshell.config import ConfigError, TshellConfig, load_config
from tshell.exitcodes import CommandError, ExitCode

Handler = Callable[[argparse.Namespace, TextIO], ExitCode]
if TYPE_CHECKING:  # argparse names the type of add_subparsers' result privately
    from typing import TypeAlias

    Subparsers: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]
RUN_ERROR_PREFIX = "error: "


class CommandSession(NamedTuple):
    """Where a command works: the resolved settings (Airflow, the cluster) and the login."""

    config: TshellConfig
    airflow: AirflowSession


def open_session() -> CommandSession:
    """The settings (tshell/config.py) and a session with Airflow that logs in when first used."""
    config = load_config()
    return CommandSession(config, AirflowSession(config.airflow))


def set_command(
    parser: argparse.ArgumentParser, handler: Handler, error_prefix: str = RUN_ERROR_PREFIX
) -> None:
    """`handler` runs when `parser`'s command is given; its failures follow `error_prefix`."""
    parser.set_defaults(func=handler, error_prefix=error_prefix)


def run_command(args: argparse.Namespace, out: TextIO) -> ExitCode:
    """The parsed command's handler, its errors turned into a message and an exit code."""
    prefix = args.error_prefix
    try:
        return ExitCode(args.func(args, out))
    except KeyboardInterrupt:
        sys.stderr.write("tshell: interrupted\n")
        return ExitCode.INTERRUPTED
    except CommandError as exc:
        sys.stderr.write(f"{prefix}{exc}\n")
        return exc.code
    except ConfigError as exc:
        sys.stderr.write(f"{prefix}{exc}\n")
        return ExitCode.CONFIG_ERROR
    except AirflowClientError as exc:
        sys.stderr.write(f"{prefix}{exc}\n")
        not_found = isinstance(exc, AirflowNotFoundError)
        return ExitCode.NOT_FOUND if not_found else ExitCode.AIRFLOW_ERROR
