"""How a pod on a simulated node behaves: read from its annotations, pure.

A hollow pod runs no process, so what a process would decide (how long it runs, its exit code,
how long it takes to end after SIGTERM) is written on the pod. Values are checked here; a bad
one keeps the pod's containers waiting with CreateContainerConfigError, as a real kubelet does
with a container it cannot configure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from localkube.errors import LocalkubeError

RUN_SECONDS = "localkube.io/simulate-run-seconds"
EXIT_CODE = "localkube.io/simulate-exit-code"
STOP_SECONDS = "localkube.io/simulate-stop-seconds"
START_SECONDS = "localkube.io/simulate-start-seconds"
RUN_AFTER_FILE = "localkube.io/simulate-run-after-file"
MAX_SECONDS = 7 * 24 * 3600.0
# A container stopped by SIGTERM ends as a process killed by that signal (128 + 15), one still
# running at the grace period's end as one killed by SIGKILL (128 + 9).
SIGTERM_EXIT_CODE = 143
SIGKILL_EXIT_CODE = 137


class RuleError(LocalkubeError, ValueError):
    """An annotation's value cannot be used; the message names it, its value and what is allowed."""


@dataclass(frozen=True)
class SimulationRule:
    """`run_seconds` None: the containers run until stopped."""

    start_seconds: float = 0.0
    run_seconds: float | None = None
    exit_code: int = 0
    stop_seconds: float = 0.0
    run_after_file: str | None = None  # the run's clock starts once this file is in the pod


def read_seconds(annotations: dict, key: str) -> float | None:
    text = annotations.get(key)
    if text is None:
        return None
    try:
        seconds = float(text)
    except (TypeError, ValueError):
        seconds = math.nan
    if not 0 <= seconds <= MAX_SECONDS:
        raise RuleError(
            f"annotation {key}: {text!r} given; a number of seconds from 0 to "
            f"{MAX_SECONDS:g} is allowed"
        )
    return seconds


def read_exit_code(annotations: dict) -> int:
    text = annotations.get(EXIT_CODE)
    if text is None:
        return 0
    try:
        code = int(text)
    except (TypeError, ValueError):
        code = -1
    if not 0 <= code <= 255:
        raise RuleError(
            f"annotation {EXIT_CODE}: {text!r} given; an integer from 0 to 255 is allowed"
        )
    return code


def env_annotation_name(key: str) -> str:
    """The environment variable that stands for annotation `key` when the pod lacks it:
    `localkube.io/simulate-run-seconds` → `LOCALKUBE_SIMULATE_RUN_SECONDS`."""
    return "LOCALKUBE_" + key.split("/", 1)[1].replace("-", "_").upper()


def read_annotations(pod: dict) -> dict:
    """The pod's simulation annotations; one it lacks is taken from the same-named environment
    variable of its containers (`env_annotation_name`), so a client that can set environment
    variables but not annotations (a training request's `env`) can still say how a pod behaves."""
    annotations = dict((pod.get("metadata") or {}).get("annotations") or {})
    for container in (pod.get("spec") or {}).get("containers") or []:
        env = {e.get("name"): e.get("value") for e in container.get("env") or []}
        for key in (RUN_SECONDS, EXIT_CODE, STOP_SECONDS, START_SECONDS, RUN_AFTER_FILE):
            if key not in annotations and env.get(env_annotation_name(key)) is not None:
                annotations[key] = env[env_annotation_name(key)]
    return annotations


def read_file_path(annotations: dict) -> str | None:
    text = annotations.get(RUN_AFTER_FILE)
    if text is None:
        return None
    if not isinstance(text, str) or not text.startswith("/") or "\0" in text or len(text) > 4096:
        raise RuleError(
            f"annotation {RUN_AFTER_FILE}: {text!r} given; an absolute path in the "
            "pod's filesystem is allowed"
        )
    return text


def read_rule(pod: dict) -> SimulationRule:
    """The pod's rule; RuleError when an annotation's value is not allowed."""
    annotations = read_annotations(pod)
    return SimulationRule(
        start_seconds=read_seconds(annotations, START_SECONDS) or 0.0,
        run_seconds=read_seconds(annotations, RUN_SECONDS),
        exit_code=read_exit_code(annotations),
        stop_seconds=read_seconds(annotations, STOP_SECONDS) or 0.0,
        run_after_file=read_file_path(annotations),
    )


def ends_restarted(policy: str, exit_code: int) -> bool:
    """Whether a container that exited with `exit_code` is started again under `policy`."""
    return policy == "Always" or (policy == "OnFailure" and exit_code != 0)


def stop_outcome(rule: SimulationRule, grace: float) -> tuple[float, int]:
    """(seconds until the container ends, its exit code) once it is sent SIGTERM."""
    if grace <= 0:
        return 0.0, SIGKILL_EXIT_CODE
    if rule.stop_seconds <= grace:
        return rule.stop_seconds, SIGTERM_EXIT_CODE
    return grace, SIGKILL_EXIT_CODE
