"""Find every process of one Airflow instance, also after its launcher crashed.

Why this exists: `down` must stop what `up` started and nothing else, even after
a kill -9 of the launcher (scripts/airflow_server.py). Two marks find them: an
environment marker every process inherits, and the session the launcher
started, which its children keep after it died.
"""

from __future__ import annotations

import os
from pathlib import Path

INSTANCE_MARKER = "TFJOB_AIRFLOW_INSTANCE"


def read_session_id(pid: int) -> int | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None
    return int(fields[3])


def has_marker(pid: int, marker: bytes) -> bool:
    try:
        return marker in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False


def is_python_or_airflow(pid: int) -> bool:
    """Whether the process runs Python or calls itself airflow (setproctitle's names)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False
    return b"airflow" in command or b"python" in command


def find_instance_pids(home: Path, session_id: int | None = None) -> list[int]:
    """Every process of the instance: by environment marker or by its session.

    The session is what finds processes after a crash: Airflow's setproctitle
    overwrites the memory behind /proc/<pid>/environ, so its renamed processes
    (serve-logs, LocalExecutor workers) no longer show the marker, but they stay
    in the session the launcher started. A session id cannot be handed to a new
    process while any process is still in that session; only Python or
    `airflow …` processes are taken from it, in case every old one is gone and
    the number was reused.
    """
    marker = f"{INSTANCE_MARKER}={home.resolve()}".encode()
    own = os.getpid()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == own:
            continue
        pid = int(entry.name)
        if has_marker(pid, marker) or (
            session_id is not None
            and read_session_id(pid) == session_id
            and is_python_or_airflow(pid)
        ):
            found.append(pid)
    return found
