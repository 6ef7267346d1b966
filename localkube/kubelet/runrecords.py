"""How each run of a container is written into its ContainerRecord.

A run cannot be created (its config is bad: the container waits), fails to
start, starts, or ends with its shim's exit record. These functions turn each
outcome into the record fields build_pod_status reports, so that podworker.py
holds only the sequencing. Their one piece of I/O: reading a failed run's log
tail for terminationMessagePolicy FallbackToLogsOnError.
"""

from __future__ import annotations

import os

from localkube.kubelet.environment import NoCommandError
from localkube.kubelet.lifecycle import RunResult
from localkube.kubelet.runtime import ContainerRun
from localkube.kubelet.status import ContainerRecord, ContainerState, now_rfc3339

FALLBACK_LINES = 80  # terminationMessagePolicy FallbackToLogsOnError, as the kubelet
FALLBACK_BYTES = 2048


def termination_reason(record: dict) -> str:
    if record.get("oomKilled"):
        return "OOMKilled"
    if record.get("reason"):
        return record["reason"]
    return "Completed" if record.get("exitCode") == 0 else "Error"


def read_fallback_message(pod_dir: str, spec: dict, record: ContainerRecord) -> str | None:
    """terminationMessagePolicy FallbackToLogsOnError: the log's tail when the run failed."""
    if spec.get("terminationMessagePolicy") != "FallbackToLogsOnError" or record.exit_code == 0:
        return None
    path = os.path.join(pod_dir, "logs", record.name, f"{record.restart_count}.log")
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - 64 * 1024))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return None
    text = "\n".join(
        line.split(" ", 3)[3] for line in lines[-FALLBACK_LINES:] if line.count(" ") >= 3
    )
    return text[-FALLBACK_BYTES:] or None


def record_create_error(record: ContainerRecord, error: Exception) -> RunResult:
    """The run could not be configured: the container waits; returns the run's result.

    No command is final (exit 128); any other config error is retried."""
    no_command = isinstance(error, NoCommandError)
    record.state = ContainerState.WAITING
    record.waiting_reason = "CreateContainerError" if no_command else "CreateContainerConfigError"
    record.waiting_message = str(error)
    return RunResult(exit_code=128) if no_command else RunResult(exit_code=1, retry=True)


def record_start_error(record: ContainerRecord, error: str) -> None:
    """The shim could not start the container: terminated at once, StartError (exit 128)."""
    now = now_rfc3339()
    record.state, record.exit_code, record.reason = ContainerState.TERMINATED, 128, "StartError"
    record.message, record.started_at, record.finished_at = error, now, now
    record.ready = False


def record_run_started(record: ContainerRecord, run: ContainerRun, pod_uid: str) -> None:
    record.state, record.started_at, record.waiting_message = (
        ContainerState.RUNNING,
        run.started_at,
        None,
    )
    record.container_id = f"localkube://{pod_uid[:8]}-{record.name}-{record.restart_count}"


def record_run_exit(record: ContainerRecord, result: dict, pod_dir: str, spec: dict) -> None:
    """The run ended with the exit record `result` (its shim's, or one standing in for it)."""
    record.state, record.ready = ContainerState.TERMINATED, False
    record.exit_code = result.get("exitCode", 137)
    record.signal = result.get("signal")
    record.reason = termination_reason(result)
    record.message = result.get("message") or read_fallback_message(pod_dir, spec, record)
    record.finished_at = result.get("finishedAt") or now_rfc3339()
    if result.get("startedAt"):
        record.started_at = result["startedAt"]
