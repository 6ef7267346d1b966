"""Acting on a run's gang from a test while its DAG runs: find, drain, abandon.

Shared by the end-to-end restart tests (the stand-in's, tests/pipeline/test_pipeline_restarts.py,
and real TensorFlow's, tests/pipeline/test_pipeline_tensorflow_restart.py).
"""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from harness.pipeline_fixtures import NAMESPACE
from tfjob.naming import ANNOTATION_ATTEMPTS, LABEL_INDEX, LABEL_ROLE, job_selector


def first_gang_pods(world, job: str) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """{replica: pod} of the job's first gang (pods without the attempts annotation)."""
    api = world.kube.core_v1()
    pods = {}
    for pod in api.list_namespaced_pod(NAMESPACE, label_selector=job_selector(job)).items:
        if ANNOTATION_ATTEMPTS in (pod.metadata.annotations or {}):
            continue
        labels = pod.metadata.labels or {}
        pods[f"{labels.get(LABEL_ROLE)}-{labels.get(LABEL_INDEX)}"] = pod
    return pods


def delete_like_a_drain(world, pod: Any) -> None:  # type: ignore[no-untyped-def]
    """Delete one pod with its own grace period (terminationGracePeriodSeconds, as `kubectl
    drain` does), and only that object: the uid precondition cannot hit a newer pod. `world`:
    anything with a `kube` (a LocalkubeHandle): a pipeline world or the chaos soak's."""
    world.kube.core_v1().delete_namespaced_pod(
        pod.metadata.name,
        pod.metadata.namespace,
        body=k8s.V1DeleteOptions(preconditions=k8s.V1Preconditions(uid=pod.metadata.uid)),
    )


def abandon(world, running, job: str) -> None:  # type: ignore[no-untyped-def]
    """The test failed before the run ended: stop `dag.test()` and remove the job's pods,
    so the next tests of the module do not share two cores with them."""
    running.kill()
    running.communicate()
    api = world.kube.core_v1()
    for pod in api.list_namespaced_pod(NAMESPACE, label_selector=job_selector(job)).items:
        try:
            api.delete_namespaced_pod(pod.metadata.name, NAMESPACE, grace_period_seconds=0)
        except ApiException:
            pass
