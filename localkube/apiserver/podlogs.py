"""`pods/log`: which container log file a request means, and its query options.

Files: DIR/kubelet/pods/<uid>/logs/<container>/<restartCount>.log, one line per output line:
`<RFC3339Nano> <stdout|stderr> <F|P> <text>`. P marks a partial line joined to the next one.
The kubelet rotates each file by size (`<restartCount>.log.<time>`, kubelet/logwriter.py);
logreader.py reads the current one in bounded memory.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path

from localkube.apiserver import errors
from localkube.apiserver.logreader import ReadWindow, parse_timestamp


def pod_dir(state_dir: str, uid: str) -> Path:
    return Path(state_dir) / "kubelet" / "pods" / uid


def read_pod_state(state_dir: str, uid: str) -> dict:
    try:
        return json.loads((pod_dir(state_dir, uid) / "state.json").read_text())
    except (OSError, ValueError):
        return {}


def pick_container(pod: dict, container: str | None) -> str:
    spec = pod.get("spec") or {}
    names = [c["name"] for c in spec.get("containers") or []]
    init_names = [c["name"] for c in spec.get("initContainers") or []]
    name = pod["metadata"]["name"]
    if not container:
        if len(names) == 1:
            return names[0]
        message = (
            f"a container name must be specified for pod {name}, choose one of: [{' '.join(names)}]"
        )
        if init_names:
            message += f" or one of the init containers: [{' '.join(init_names)}]"
        raise errors.bad_request(message)
    if container not in names and container not in init_names:
        raise errors.bad_request(f"container {container} is not valid for pod {name}")
    return container


def _container_status(pod: dict, container: str) -> dict:
    status = pod.get("status") or {}
    for entry in (status.get("containerStatuses") or []) + (
        status.get("initContainerStatuses") or []
    ):
        if entry.get("name") == container:
            return entry
    return {}


def is_terminated(pod: dict | None, container: str) -> bool:
    if pod is None:
        return True
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return True
    return "terminated" in (_container_status(pod, container).get("state") or {})


def current_restart(state_dir: str, uid: str, container: str) -> int | None:
    entry = read_pod_state(state_dir, uid).get("containers", {}).get(container) or {}
    return entry.get("restartCount")


def log_file(state_dir: str, pod: dict, container: str, previous: bool) -> Path | None:
    """The file to read; None when the container finished without a log file."""
    name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
    directory = pod_dir(state_dir, uid) / "logs" / container
    state = read_pod_state(state_dir, uid).get("containers", {}).get(container, {})
    restart = state.get("restartCount")
    if restart is None:
        numbers = [int(p.stem) for p in directory.glob("*.log") if p.stem.isdigit()]
        restart = max(numbers) if numbers else None
    if previous:
        if not restart:
            raise errors.bad_request(
                f'previous terminated container "{container}" in pod "{name}" not found'
            )
        restart -= 1
    if restart is None or not (directory / f"{restart}.log").exists():
        if (
            not previous
            and is_terminated(pod, container)
            and (pod.get("spec") or {}).get("nodeName")
        ):
            return None  # it ended without writing a line (e.g. it never started): no output
        if not (pod.get("spec") or {}).get("nodeName"):
            raise errors.bad_request(
                f'container "{container}" in pod "{name}" is waiting to start: ContainerCreating'
            )
        waiting = (_container_status(pod, container).get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason", "ContainerCreating")
        raise errors.bad_request(
            f'container "{container}" in pod "{name}" is waiting to start: {reason}'
        )
    return directory / f"{restart}.log"


class LogOptions:
    def __init__(self, query) -> None:
        def integer(key: str) -> int | None:
            value = query.get(key)
            if value in (None, ""):
                return None
            try:
                return int(value)
            except ValueError:
                raise errors.bad_request(f"{key}={value!r} is not an integer") from None

        self.timestamps = query.get("timestamps", "false").lower() in ("true", "1")
        self.follow = query.get("follow", "false").lower() in ("true", "1")
        self.previous = query.get("previous", "false").lower() in ("true", "1")
        self.tail_lines = integer("tailLines")
        self.limit_bytes = integer("limitBytes")
        since_seconds = integer("sinceSeconds")
        self.since: datetime.datetime | None = None
        if since_seconds is not None:
            self.since = datetime.datetime.now(datetime.UTC) - datetime.timedelta(
                seconds=since_seconds
            )
        elif query.get("sinceTime"):
            try:
                self.since = parse_timestamp(query["sinceTime"])
            except ValueError:
                raise errors.bad_request(
                    f"sinceTime={query['sinceTime']!r} is not RFC 3339"
                ) from None

    def window(self) -> ReadWindow:
        return ReadWindow(self.tail_lines, self.since, self.timestamps)
