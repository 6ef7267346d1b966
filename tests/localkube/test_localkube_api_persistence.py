"""Objects survive a localkube restart, resourceVersions keep increasing, and watches from
before the restart get 410 Gone (the client must relist), as after an etcd compaction."""

from __future__ import annotations

import json
import os
import signal

import pytest
from kubernetes import watch
from kubernetes.client import ApiException

from harness.localkube_fixtures import start_localkube, stop_localkube


def test_objects_survive_restart_and_versions_continue(tmp_path):
    handle = start_localkube(tmp_path, kubelets=False)
    try:
        core = handle.core_v1()
        core.create_namespace({"metadata": {"name": "keep"}})
        cm = core.create_namespaced_config_map(
            "keep", {"metadata": {"name": "c", "labels": {"a": "b"}}, "data": {"k": "v"}}
        )
        pod = core.create_namespaced_pod(
            "keep",
            {
                "metadata": {"name": "p"},
                "spec": {
                    "schedulerName": "nobody",
                    "containers": [{"name": "c", "image": "busybox:1"}],
                },
            },
        )
        core.patch_namespaced_config_map("c", "keep", {"data": {"k": "v2"}})
        last_rv = int(core.read_namespaced_config_map("c", "keep").metadata.resource_version)
    finally:
        stop_localkube(handle)

    handle = start_localkube(tmp_path, kubelets=False)
    try:
        core = handle.core_v1()
        again = core.read_namespaced_config_map("c", "keep")
        assert again.data == {"k": "v2"} and again.metadata.uid == cm.metadata.uid
        assert core.read_namespaced_pod("p", "keep").metadata.uid == pod.metadata.uid
        assert core.read_namespaced_service_account("default", "keep")
        created = core.create_namespaced_config_map("keep", {"metadata": {"name": "after"}})
        assert int(created.metadata.resource_version) > last_rv
        with pytest.raises(ApiException) as error:
            for _ in watch.Watch().stream(
                core.list_namespaced_config_map,
                "keep",
                resource_version=str(last_rv - 1),
                timeout_seconds=2,
            ):
                pass
        assert error.value.status == 410
    finally:
        stop_localkube(handle)


def test_a_killed_api_server_loses_nothing_it_acknowledged(tmp_path):
    handle = start_localkube(tmp_path, kubelets=False)
    info = json.loads((tmp_path / "localkube" / "localkube.json").read_text())
    try:
        core = handle.core_v1()
        names = [f"c{i}" for i in range(20)]
        for name in names:
            core.create_namespaced_config_map("default", {"metadata": {"name": name}})
        os.kill(info["pids"]["apiserver"], signal.SIGKILL)
        # `up` notices the dead server, cleans up and starts a new one on the same state.
        handle = start_localkube(tmp_path, kubelets=False)
        kept = {
            c.metadata.name for c in handle.core_v1().list_namespaced_config_map("default").items
        }
        assert set(names) <= kept
    finally:
        stop_localkube(handle)
