"""How long a pod's containers are given to end: the grace period and the active deadline.

Readings of the pod object that the PodWorker's stop path consults (a
deletion's own grace period wins over the spec's terminationGracePeriodSeconds),
and the wait for activeDeadlineSeconds, which fails the pod with DeadlineExceeded.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from localkube.kubelet.status import PodRuntimeFacts

DEFAULT_GRACE_S = 30
START_TIME_POLL_S = 0.1
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


async def sleep_until_deadline(
    pod: dict, facts: PodRuntimeFacts, age_of: Callable[[str], float]
) -> bool:
    """Return True once activeDeadlineSeconds has passed since the pod's start (known once the
    kubelet accepts the pod: `facts.start_time`); False at once when the pod has no deadline."""
    deadline = read_active_deadline(pod)
    if deadline is None:
        return False
    while not facts.start_time:
        await asyncio.sleep(START_TIME_POLL_S)
    started = time.time() - age_of(facts.start_time)
    await asyncio.sleep(max(0.0, started + deadline - time.time()))
    return True
