"""Exit codes and the one error type of the tshell run commands.

Why this exists: every run command ends with an exit code a script can act on
and, on failure, one message a person can act on; the S3 helpers raise the
same error as the commands, so it lives below both.
"""

from __future__ import annotations

import enum

from tshell.errors import TshellError


class ExitCode(enum.IntEnum):
    """What a run command's exit status means (docs/tshell.md, exit codes).

    RUN_FAILED: `submit --wait` saw the run fail. AIRFLOW_ERROR: Airflow did not
    do it: unreachable, login refused, not allowed (403), or input refused.
    NOT_FOUND: no such run, DAG (a tenant without a submit DAG too) or S3 object.
    """

    OK = 0
    RUN_FAILED = 1
    INVALID_REQUEST = 2
    AIRFLOW_ERROR = 3
    NOT_FOUND = 4
    CONFIG_ERROR = 5


class CommandError(TshellError):
    """An error for the person at the terminal, with the exit code to leave with."""

    def __init__(self, message: str, code: ExitCode) -> None:
        super().__init__(message)
        self.code = code
