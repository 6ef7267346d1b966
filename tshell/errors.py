"""The base of every error tshell raises (the tree is drawn in tshell/__init__.py).

tshell ends every failure with one message for the person at the terminal
and an exit code (exitcodes.ExitCode); `except TshellError` catches all of
ours, whatever layer raised it.
"""


class TshellError(Exception):
    """Something tshell could not do, worded for the person at the terminal."""
