"""The cluster variables a replica's program gets, all from one `TF_CONFIG`.

`cluster.json` carries only `{"tf_config": {"cluster": ..., "task": ...}}`: the
TF1-style variables (PS_HOSTS, WORKER_HOSTS, CHIEF_HOSTS, JOB_NAME, TASK_INDEX)
say the same thing, so they are derived here, in the pod, rather than sent
again. Every replica's file lists every replica, so what one delivery carries
grows with the gang and the whole delivery with its square: sending the
cluster once per file instead of twice halves it (bench/RESULTS.md, 7a).
tfjob.clusterspec builds TF_CONFIG and uses `derive_legacy_env` for the same
variables, so the platform and the pod cannot disagree.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

# The TF1-style variables, in the order they are documented (docs/pod-protocol.md).
LEGACY_VARIABLES = ("PS_HOSTS", "WORKER_HOSTS", "CHIEF_HOSTS", "JOB_NAME", "TASK_INDEX")


def derive_legacy_env(tf_config: Mapping[str, object]) -> dict[str, str]:
    """PS_HOSTS and WORKER_HOSTS (comma-joined, empty when the job has none), CHIEF_HOSTS
    only when the cluster has a chief, JOB_NAME and TASK_INDEX from the task.

    The evaluator's TF_CONFIG task is not in the cluster: it gets the training cluster's
    host lists and JOB_NAME=evaluator, as TF_CONFIG gives it. A chief named `master` (the
    request's chief_task_type, as Kubeflow TFJob names it) gives CHIEF_HOSTS too, and
    JOB_NAME=master. Raises ValueError naming the field when `tf_config` is not that shape.
    """
    cluster = tf_config.get("cluster")
    task = tf_config.get("task")
    if not isinstance(cluster, dict):
        raise ValueError(
            f"tf_config.cluster: {type(cluster).__name__} given; an object is required"
        )
    if not isinstance(task, dict):
        raise ValueError(f"tf_config.task: {type(task).__name__} given; an object is required")
    hosts = {}
    for job in ("chief", "master", "ps", "worker"):
        addresses = cluster.get(job, [])
        if not isinstance(addresses, list) or not all(isinstance(a, str) for a in addresses):
            raise ValueError(
                f"tf_config.cluster.{job}: {addresses!r} given; a list of strings is required"
            )
        hosts[job] = ",".join(addresses)
    kind, index = task.get("type"), task.get("index")
    if not isinstance(kind, str) or not kind:
        raise ValueError(f"tf_config.task.type: {kind!r} given; a role name is required")
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise ValueError(f"tf_config.task.index: {index!r} given; an integer >= 0 is required")
    env = {"PS_HOSTS": hosts["ps"], "WORKER_HOSTS": hosts["worker"]}
    if hosts["chief"] or hosts["master"]:
        env["CHIEF_HOSTS"] = hosts["chief"] or hosts["master"]
    return env | {"JOB_NAME": kind, "TASK_INDEX": str(index)}


def cluster_environment(spec: object) -> dict[str, str]:
    """TF_CONFIG and the legacy variables from cluster.json; raises ValueError naming the field."""
    if not isinstance(spec, dict):
        raise ValueError(f"cluster.json: {type(spec).__name__} given; an object is required")
    tf_config = spec.get("tf_config")
    if not isinstance(tf_config, dict):
        raise ValueError(
            f"cluster.json: tf_config: {type(tf_config).__name__} given; an object is required"
        )
    env = {"TF_CONFIG": json.dumps(tf_config, separators=(",", ":"))}
    return env | derive_legacy_env(tf_config)
