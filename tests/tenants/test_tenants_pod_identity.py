"""A tenant's pods run as that tenant's uid/gid, on a real localkube (pods are real processes).

The pods are shaped as the pipeline's (`tfjob.manifests` security contexts, the tenant's
`tfjob-runner` account, a workspace emptyDir) in namespaces `apply_tenants` made from the
shipped tenants file, so the namespaces enforce the `restricted` Pod Security Standard."""

from __future__ import annotations

import os

import kubernetes
import pytest

from harness.localkube_fixtures import wait_until
from tenancy.apply import Clients, apply_tenants
from tfjob.manifests import (
    build_container_security_context,
    build_home_env,
    build_pod_security_context,
)
from tfjob.tenants import DEFAULT_TENANTS_FILE, load_tenants
from tfjob.tenants.model import SERVICE_ACCOUNT_NAME

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="the kubelet needs root"),
]

SCRIPT = (
    "echo uid=$(id -u) gid=$(id -g) groups=$(id -G); "
    "echo left > /workspace/file && stat -c 'workspace=%u:%g' /workspace/file"
)


def tenant_pod(name: str, user) -> dict:
    return {
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "serviceAccountName": SERVICE_ACCOUNT_NAME,
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 0,
            "securityContext": build_pod_security_context(user),
            "volumes": [{"name": "workspace", "emptyDir": {}}],
            "containers": [
                {
                    "name": "tensorflow",
                    "image": "python:3.11",
                    "command": ["sh", "-c", SCRIPT],
                    "env": [build_home_env()],
                    "volumeMounts": [{"name": "workspace", "mountPath": "/workspace"}],
                    "securityContext": build_container_security_context(),
                }
            ],
        },
    }


def test_the_pods_of_two_tenants_run_as_their_own_tenants_uid_and_gid(localkube):
    config = load_tenants(DEFAULT_TENANTS_FILE)
    demo, research = config.find("demo"), config.find("research")
    assert demo.pod_user != research.pod_user
    clients = Clients.from_api_client(kubernetes.client.ApiClient(localkube.kube_configuration()))
    apply_tenants(clients, config, only=["demo", "research"])
    v1 = clients.core
    for tenant in (demo, research):
        v1.create_namespaced_pod(tenant.namespace, tenant_pod("whoami", tenant.pod_user))
    for tenant in (demo, research):
        wait_until(
            lambda t=tenant: (
                v1.read_namespaced_pod("whoami", t.namespace).status.phase
                in ("Succeeded", "Failed")
            ),
            timeout=120,
            what=f"the pod of tenant {tenant.name} to end",
        )
        pod = v1.read_namespaced_pod("whoami", tenant.namespace)
        log = v1.read_namespaced_pod_log(
            "whoami", tenant.namespace, _preload_content=False
        ).data.decode()
        assert pod.status.phase == "Succeeded", log
        user = tenant.pod_user
        assert f"uid={user.uid} gid={user.gid} groups={user.gid}" in log, log
        # what the pod leaves is its tenant's, by owner and group
        assert f"workspace={user.uid}:{user.gid}" in log, log
