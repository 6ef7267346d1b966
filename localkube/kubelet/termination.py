"""How long a pod's containers are given to end: the grace period and the active deadline.

Pure readings of the pod object that the PodWorker's stop path consults: a
deletion's own grace period wins over the spec's terminationGracePeriodSeconds,
and activeDeadlineSeconds fails the pod with DeadlineExceeded.
"""

from __future__ import annotations

DEFAULT_GRACE_S = 30
DEADLINE_EXCEEDED_MESSAGE = "Pod was active on the node longer than the specified deadline"


def read_grace_period(pod: dict) -> float:
    """Seconds between SIGTERM and SIGKILL when the pod's containers are stopped."""
    meta = pod["metadata"]
    if meta.get("deletionGracePeriodSeconds") is not None:
        return float(meta["deletionGracePeriodSeconds"])
    return float((pod.get("spec") or {}).get("terminationGracePeriodSeconds") or DEFAULT_GRACE_S)


def read_active_deadline(pod: dict) -> float | None:
    """activeDeadlineSeconds: how long after its start the pod may stay active, if limited."""
    deadline = (pod.get("spec") or {}).get("activeDeadlineSeconds")
    return None if deadline is None else float(deadline)
