"""The restart policy and the crash back-off: whether an ended container runs again, and when.

Policy, not mechanics: pure functions the PodWorker's container loops consult
after each run, kept apart so they can be read (and tested) without the worker.
"""

from __future__ import annotations

from localkube.kubelet.status import RestartPolicy

BACKOFF_INITIAL_S = 10
BACKOFF_MAX_S = 300


def restart_delay(restart_count: int) -> float:
    """The kubelet's crash back-off: first restart at once, then 10 s doubling to 5 min."""
    if restart_count == 0:
        return 0.0
    return min(BACKOFF_INITIAL_S * 2 ** (restart_count - 1), BACKOFF_MAX_S)


def should_restart(policy: RestartPolicy, exit_code: int) -> bool:
    return policy is RestartPolicy.ALWAYS or (policy is RestartPolicy.ON_FAILURE and exit_code != 0)


def describe_back_off(delay: float, container: str, pod: dict) -> str:
    """The CrashLoopBackOff waiting message, worded as the kubelet's."""
    meta = pod["metadata"]
    return (
        f"back-off {delay:.0f}s restarting failed container={container} "
        f"pod={meta['name']}_{meta['namespace']}({meta['uid']})"
    )
