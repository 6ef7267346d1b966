"""tshell's run commands: submit, list, status, logs, cancel and download, and what they
share (finding a run, reading its files, showing it)."""
