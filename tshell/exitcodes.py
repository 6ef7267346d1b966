"""What a tshell command's exit status means, and the one error that carries it.

Why this exists: every command (pack, upload, push, the run commands,
tenants) ends with an exit code a script can act on and, on failure, one
message a person can act on (docs/tshell.md, exit codes). The helpers below
the commands (finding a run, reading its files) raise the same error, so it
lives below all of them.
"""

from __future__ import annotations

import enum

from tshell.errors import TshellError


class ExitCode(enum.IntEnum):
    """What a command's exit status means.

    FAILED: the command could not do its work (`submit --wait` saw the run
    fail; a pack, upload or push failed; tenants could not be applied).
    INVALID_REQUEST: the request or the command line is refused before
    anything is done. AIRFLOW_ERROR: Airflow did not do it: unreachable, login
    refused, not allowed (403), or input refused. NOT_FOUND: no such run, DAG
    (a tenant without a submit DAG too) or file. CONFIG_ERROR: no usable
    setting (no password anywhere, a user the users file lacks). INTERRUPTED:
    Ctrl-C (128 + SIGINT, as a shell reports it).
    """

    OK = 0
    FAILED = 1
    INVALID_REQUEST = 2
    AIRFLOW_ERROR = 3
    NOT_FOUND = 4
    CONFIG_ERROR = 5
    INTERRUPTED = 130


class CommandError(TshellError):
    """An error for the person at the terminal, with the exit code to leave with."""

    def __init__(self, message: str, code: ExitCode) -> None:
        super().__init__(message)
        self.code = code
