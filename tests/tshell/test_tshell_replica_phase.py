"""tshell shows a replica's phase as its `tensorflow` container makes it, keeper or not."""

from __future__ import annotations

from kubernetes.client import (
    V1ContainerState,
    V1ContainerStateRunning,
    V1ContainerStateTerminated,
    V1ContainerStatus,
    V1Pod,
    V1PodStatus,
)

from tshell.replica_logs import replica_phase


def pod(phase: str, main_exit: int | None) -> V1Pod:
    main = V1ContainerState(
        terminated=V1ContainerStateTerminated(exit_code=main_exit)
        if main_exit is not None
        else None,
        running=V1ContainerStateRunning() if main_exit is None else None,
    )
    keeper = V1ContainerState(running=V1ContainerStateRunning())
    statuses = [
        V1ContainerStatus(
            name="tensorflow", state=main, image="i", image_id="", ready=False, restart_count=0
        ),
        V1ContainerStatus(
            name="tfjob-keeper", state=keeper, image="i", image_id="", ready=True, restart_count=0
        ),
    ]
    return V1Pod(status=V1PodStatus(phase=phase, container_statuses=statuses))


def test_an_owner_pod_kept_running_by_its_keeper_shows_how_its_program_ended() -> None:
    assert replica_phase(pod("Running", None)) == "Running"
    assert replica_phase(pod("Running", 0)) == "Succeeded"
    assert replica_phase(pod("Running", 74)) == "Failed"
    assert replica_phase(pod("Failed", 3)) == "Failed"
    assert replica_phase(V1Pod(status=None)) == "Pending"
