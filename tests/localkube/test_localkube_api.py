"""The localkube API server through the official `kubernetes` client: verbs, selectors, watch,
patch formats, deletion semantics, errors, admission and garbage collection."""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest
from kubernetes import watch
from kubernetes.client import ApiException

from harness.localkube_fixtures import mark_node_ready

DEADLINE_S = 10.0


def status_of(error: pytest.ExceptionInfo) -> dict:
    """The v1 Status the server answered with."""
    return json.loads(error.value.body)


def wait_for(predicate, timeout: float = DEADLINE_S, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def core(localkube_api):
    return localkube_api.core_v1()


@pytest.fixture
def ns(core):
    name = f"t-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    return name


def pod_body(name: str, labels: dict | None = None, **spec) -> dict:
    container = {"name": "main", "image": "busybox:1.36", "command": ["sleep", "60"]}
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"containers": [container], **spec},
    }


def test_create_sets_server_fields_and_refuses_duplicates(core, ns):
    pod = core.create_namespaced_pod(ns, pod_body("a"))
    assert pod.metadata.uid and pod.metadata.resource_version and pod.metadata.creation_timestamp
    assert pod.metadata.namespace == ns
    assert pod.status.phase == "Pending"
    with pytest.raises(ApiException) as error:
        core.create_namespaced_pod(ns, pod_body("a"))
    assert error.value.status == 409
    assert status_of(error)["reason"] == "AlreadyExists"
    assert status_of(error)["message"] == 'pods "a" already exists'


def test_create_in_missing_namespace_is_404(core):
    with pytest.raises(ApiException) as error:
        core.create_namespaced_config_map("no-such-ns", {"metadata": {"name": "x"}})
    assert error.value.status == 404
    assert status_of(error)["message"] == 'namespaces "no-such-ns" not found'


def test_generate_name_gives_unique_names(core, ns):
    names = {
        core.create_namespaced_config_map(ns, {"metadata": {"generateName": "cm-"}}).metadata.name
        for _ in range(5)
    }
    assert len(names) == 5 and all(n.startswith("cm-") and len(n) == 8 for n in names)


def test_invalid_pod_is_422_naming_the_field(core, ns):
    with pytest.raises(ApiException) as error:
        core.create_namespaced_pod(
            ns, {"metadata": {"name": "bad"}, "spec": {"containers": [{"name": "c"}]}}
        )
    assert error.value.status == 422
    assert "spec.containers[0].image: Required value" in status_of(error)["message"]


def test_get_missing_is_404_status(core, ns):
    with pytest.raises(ApiException) as error:
        core.read_namespaced_pod("nope", ns)
    assert error.value.status == 404
    assert status_of(error) | {"details": None} == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'pods "nope" not found',
        "reason": "NotFound",
        "code": 404,
        "details": None,
    }


@pytest.mark.parametrize(
    "selector, expected",
    [
        ("app=web", {"w1", "w2"}),
        ("app==web", {"w1", "w2"}),
        ("app!=web", {"d1", "plain"}),
        ("app in (web,db)", {"w1", "w2", "d1"}),
        ("app notin (web)", {"d1", "plain"}),
        ("tier", {"w1", "d1"}),
        ("!tier", {"w2", "plain"}),
        ("app=web,tier=front", {"w1"}),
    ],
)
def test_list_with_label_selectors(core, ns, selector, expected):
    for name, labels in (
        ("w1", {"app": "web", "tier": "front"}),
        ("w2", {"app": "web"}),
        ("d1", {"app": "db", "tier": "back"}),
        ("plain", {}),
    ):
        core.create_namespaced_config_map(ns, {"metadata": {"name": name, "labels": labels}})
    found = core.list_namespaced_config_map(ns, label_selector=selector)
    assert {i.metadata.name for i in found.items} == expected
    assert int(found.metadata.resource_version) > 0


def test_list_with_field_selectors(core, ns):
    core.create_namespaced_pod(ns, pod_body("p1"))
    core.create_namespaced_pod(ns, pod_body("p2"))
    by_name = core.list_namespaced_pod(ns, field_selector="metadata.name=p1")
    assert [p.metadata.name for p in by_name.items] == ["p1"]
    unbound = core.list_pod_for_all_namespaces(
        field_selector=f"spec.nodeName=,metadata.namespace={ns}"
    )
    assert {p.metadata.name for p in unbound.items} == {"p1", "p2"}
    pending = core.list_namespaced_pod(ns, field_selector="status.phase!=Running")
    assert len(pending.items) == 2
    core.create_namespaced_event(
        ns,
        {
            "metadata": {"name": "e1"},
            "involvedObject": {"kind": "Pod", "name": "p1", "namespace": ns},
            "reason": "Test",
            "message": "m",
        },
    )
    events = core.list_namespaced_event(
        ns, field_selector="involvedObject.name=p1,involvedObject.kind=Pod,reason=Test"
    )
    assert [e.reason for e in events.items] == ["Test"]


def test_replace_with_stale_resource_version_is_409(core, ns):
    cm = core.create_namespaced_config_map(ns, {"metadata": {"name": "c"}, "data": {"k": "1"}})
    cm.data = {"k": "2"}
    updated = core.replace_namespaced_config_map("c", ns, cm)
    assert int(updated.metadata.resource_version) > int(cm.metadata.resource_version)
    cm.data = {"k": "3"}
    with pytest.raises(ApiException) as error:
        core.replace_namespaced_config_map("c", ns, cm)
    assert error.value.status == 409
    assert "the object has been modified" in error.value.body


def test_strategic_merge_patch_merges_containers_and_env_by_name(core, ns):
    body = pod_body("p")
    body["spec"]["containers"][0]["env"] = [{"name": "A", "value": "1"}]
    body["spec"]["containers"].append({"name": "side", "image": "busybox:1", "command": ["sh"]})
    core.create_namespaced_pod(ns, body)
    patched = core.patch_namespaced_pod(
        "p",
        ns,
        {
            "metadata": {"labels": {"x": "y"}},
            "spec": {"containers": [{"name": "main", "env": [{"name": "B", "value": "2"}]}]},
        },
    )
    main = next(c for c in patched.spec.containers if c.name == "main")
    assert [e.name for e in main.env] == ["A", "B"]
    assert [c.name for c in patched.spec.containers] == ["main", "side"]
    assert patched.metadata.labels == {"x": "y"}


def test_json_patch_and_merge_patch(localkube_api, core, ns):
    core.create_namespaced_config_map(
        ns, {"metadata": {"name": "c", "labels": {"a": "1"}}, "data": {"k": "v"}}
    )
    patched = core.patch_namespaced_config_map(
        "c",
        ns,
        [
            {"op": "add", "path": "/data/n", "value": "new"},
            {"op": "remove", "path": "/metadata/labels/a"},
        ],
    )
    assert patched.data == {"k": "v", "n": "new"}
    assert not patched.metadata.labels
    merged = localkube_api.request(
        "PATCH",
        f"/api/v1/namespaces/{ns}/configmaps/c",
        {"data": {"k": None, "z": "1"}},
        content_type="application/merge-patch+json",
    )
    assert merged["data"] == {"n": "new", "z": "1"}


def test_pod_status_is_only_written_through_the_status_subresource(core, ns):
    core.create_namespaced_pod(ns, pod_body("p"))
    patched = core.patch_namespaced_pod("p", ns, {"status": {"phase": "Running"}})
    assert patched.status.phase == "Pending"
    patched = core.patch_namespaced_pod_status("p", ns, {"status": {"phase": "Running"}})
    assert patched.status.phase == "Running"


def test_unbound_pod_is_deleted_at_once(core, ns):
    core.create_namespaced_pod(ns, pod_body("p"))
    core.delete_namespaced_pod("p", ns)
    assert core.list_namespaced_pod(ns).items == []


@pytest.fixture
def ready_nodes(localkube_api):
    """Nodes that look Ready (no kubelet behind them) for the length of one test."""
    for node in ("node-1", "node-2"):
        mark_node_ready(localkube_api, node)
    yield
    for node in ("node-1", "node-2"):
        mark_node_ready(localkube_api, node, ready=False)


def test_bound_pod_on_ready_node_is_deleted_gracefully(core, ns, ready_nodes):
    core.create_namespaced_pod(ns, pod_body("p", terminationGracePeriodSeconds=7))
    wait_for(lambda: core.read_namespaced_pod("p", ns).spec.node_name, what="binding")
    deleted = core.delete_namespaced_pod("p", ns)
    assert deleted.metadata.deletion_timestamp is not None
    assert deleted.metadata.deletion_grace_period_seconds == 7
    still = core.read_namespaced_pod("p", ns)
    assert still.metadata.deletion_timestamp is not None
    core.delete_namespaced_pod("p", ns, grace_period_seconds=0)
    assert core.list_namespaced_pod(ns).items == []


def test_finalizers_hold_deletion_until_removed(core, ns):
    core.create_namespaced_config_map(ns, {"metadata": {"name": "c", "finalizers": ["test/hold"]}})
    core.delete_namespaced_config_map("c", ns)
    held = core.read_namespaced_config_map("c", ns)
    assert held.metadata.deletion_timestamp is not None
    core.patch_namespaced_config_map("c", ns, {"metadata": {"finalizers": None}})
    with pytest.raises(ApiException) as error:
        core.read_namespaced_config_map("c", ns)
    assert error.value.status == 404


def test_owner_reference_garbage_collection_and_orphan(core, ns):
    owner = core.create_namespaced_config_map(ns, {"metadata": {"name": "owner"}})
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}
    core.create_namespaced_config_map(ns, {"metadata": {"name": "dep", "ownerReferences": [ref]}})
    core.create_namespaced_secret(ns, {"metadata": {"name": "dep2", "ownerReferences": [ref]}})
    core.delete_namespaced_config_map("owner", ns)
    wait_for(
        lambda: not core.list_namespaced_config_map(ns, field_selector="metadata.name=dep").items,
        what="dependent deleted",
    )
    assert core.list_namespaced_secret(ns, field_selector="metadata.name=dep2").items == []

    owner = core.create_namespaced_config_map(ns, {"metadata": {"name": "owner2"}})
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner2", "uid": owner.metadata.uid}
    core.create_namespaced_config_map(ns, {"metadata": {"name": "kept", "ownerReferences": [ref]}})
    core.delete_namespaced_config_map("owner2", ns, propagation_policy="Orphan")
    kept = core.read_namespaced_config_map("kept", ns)
    assert not kept.metadata.owner_references


def test_namespace_deletion_cascades(localkube_api, core, ns):
    core.create_namespaced_config_map(ns, {"metadata": {"name": "c"}})
    core.create_namespaced_pod(ns, pod_body("p"))
    deleted = localkube_api.request("DELETE", f"/api/v1/namespaces/{ns}")
    assert deleted["status"]["phase"] == "Terminating"
    wait_for(
        lambda: ns not in {n.metadata.name for n in core.list_namespace().items},
        what="namespace gone",
    )
    with pytest.raises(ApiException) as error:
        core.create_namespaced_config_map(ns, {"metadata": {"name": "late"}})
    assert error.value.status == 404


def test_default_namespaces_and_service_account(core, ns):
    names = {n.metadata.name for n in core.list_namespace().items}
    assert {"default", "kube-system"} <= names
    assert core.read_namespaced_service_account("default", ns).metadata.name == "default"
    with pytest.raises(ApiException) as error:
        core.delete_namespace("default")
    assert error.value.status == 403


def test_resource_quota_refuses_with_the_real_wording(core, ns):
    core.create_namespaced_resource_quota(
        ns, {"metadata": {"name": "compute"}, "spec": {"hard": {"requests.cpu": "2", "pods": "5"}}}
    )

    def requesting(name: str, cpu: str) -> dict:
        body = pod_body(name)
        body["spec"]["containers"][0]["resources"] = {"requests": {"cpu": cpu}}
        return body

    core.create_namespaced_pod(ns, requesting("a", "1500m"))
    with pytest.raises(ApiException) as error:
        core.create_namespaced_pod(ns, requesting("b", "1"))
    assert error.value.status == 403
    assert status_of(error)["message"] == (
        'pods "b" is forbidden: exceeded quota: compute, requested: requests.cpu=1, '
        "used: requests.cpu=1500m, limited: requests.cpu=2"
    )
    with pytest.raises(ApiException) as error:
        core.create_namespaced_pod(ns, pod_body("c"))
    assert (
        status_of(error)["message"]
        == 'pods "c" is forbidden: failed quota: compute: must specify requests.cpu'
    )

    used = wait_for(
        lambda: (
            (core.read_namespaced_resource_quota("compute", ns).status.used or {}).get("pods")
            == "1"
            and core.read_namespaced_resource_quota("compute", ns).status.used
        ),
        what="quota usage",
    )
    assert used == {"requests.cpu": "1500m", "pods": "1"}


def test_limit_range_defaults_container_resources(core, ns):
    core.create_namespaced_limit_range(
        ns,
        {
            "metadata": {"name": "lr"},
            "spec": {
                "limits": [
                    {
                        "type": "Container",
                        "default": {"cpu": "500m", "memory": "256Mi"},
                        "defaultRequest": {"cpu": "100m"},
                    }
                ]
            },
        },
    )
    pod = core.create_namespaced_pod(ns, pod_body("p"))
    resources = pod.spec.containers[0].resources
    assert resources.limits == {"cpu": "500m", "memory": "256Mi"}
    assert resources.requests == {"cpu": "100m", "memory": "256Mi"}


def test_watch_streams_changes_and_resumes_from_resource_version(core, ns):
    first = core.create_namespaced_config_map(ns, {"metadata": {"name": "c1"}})
    core.create_namespaced_config_map(ns, {"metadata": {"name": "c2", "labels": {"w": "1"}}})
    core.patch_namespaced_config_map("c1", ns, {"data": {"a": "b"}})
    core.delete_namespaced_config_map("c1", ns)
    seen = [
        (e["type"], e["object"].metadata.name)
        for e in watch.Watch().stream(
            core.list_namespaced_config_map,
            ns,
            resource_version=first.metadata.resource_version,
            timeout_seconds=1,
        )
    ]
    assert seen == [("ADDED", "c2"), ("MODIFIED", "c1"), ("DELETED", "c1")]
    labelled = [
        (e["type"], e["object"].metadata.name)
        for e in watch.Watch().stream(
            core.list_namespaced_config_map, ns, label_selector="w=1", timeout_seconds=1
        )
    ]
    assert labelled == [("ADDED", "c2")]


def test_watch_delivers_live_events_quickly(core, ns):
    since = core.list_namespaced_config_map(ns).metadata.resource_version
    received: list[tuple[str, str, float]] = []

    def consume() -> None:
        stream = watch.Watch()
        for event in stream.stream(
            core.list_namespaced_config_map, ns, timeout_seconds=5, resource_version=since
        ):
            received.append((event["type"], event["object"].metadata.name, time.monotonic()))
            stream.stop()

    consumer = threading.Thread(target=consume)
    consumer.start()
    time.sleep(0.3)  # let the watch connect; the event is delivered either way (resume from rv)
    created_at = time.monotonic()
    core.create_namespaced_config_map(ns, {"metadata": {"name": "live"}})
    consumer.join(timeout=6)
    assert received and received[0][:2] == ("ADDED", "live")
    assert received[0][2] - created_at < 0.5


def test_binding_sets_node_name_and_pod_scheduled(core, ns):
    core.create_namespaced_pod(ns, pod_body("p", schedulerName="nobody"))
    core.create_namespaced_pod_binding(
        "p",
        ns,
        {"metadata": {"name": "p"}, "target": {"kind": "Node", "name": "node-2"}},
        _preload_content=False,
    )
    pod = core.read_namespaced_pod("p", ns)
    assert pod.spec.node_name == "node-2"
    assert [(c.type, c.status) for c in pod.status.conditions] == [("PodScheduled", "True")]


def test_services_get_a_cluster_ip_and_secrets_encode_string_data(core, ns):
    svc = core.create_namespaced_service(
        ns, {"metadata": {"name": "s"}, "spec": {"selector": {"a": "b"}, "ports": [{"port": 80}]}}
    )
    assert svc.spec.cluster_ip.startswith("10.96.")
    assert svc.spec.ports[0].target_port == 80
    secret = core.create_namespaced_secret(
        ns, {"metadata": {"name": "s"}, "stringData": {"k": "v"}}
    )
    assert secret.data == {"k": "dg=="}


def test_a_node_filtered_watch_sees_a_pod_arrive_when_it_is_bound(localkube_api, core, ns):
    """What a kubelet relies on: spec.nodeName=<node> watches get ADDED at binding time."""
    since = core.list_pod_for_all_namespaces().metadata.resource_version
    core.create_namespaced_pod(ns, pod_body("p", schedulerName="nobody"))
    localkube_api.request(
        "POST",
        f"/api/v1/namespaces/{ns}/pods/p/binding",
        {"target": {"kind": "Node", "name": "node-2"}},
    )
    events = [
        (e["type"], e["object"].metadata.name, e["object"].spec.node_name)
        for e in watch.Watch().stream(
            core.list_pod_for_all_namespaces,
            field_selector="spec.nodeName=node-2",
            resource_version=since,
            timeout_seconds=1,
        )
        if e["object"].metadata.namespace == ns
    ]
    assert events == [("ADDED", "p", "node-2")]


def test_watch_bookmarks_and_raw_watch_lines(localkube_api, ns):
    import urllib.request

    url = (
        f"{localkube_api.api_url}/api/v1/namespaces/{ns}/configmaps?watch=1"
        "&allowWatchBookmarks=true&timeoutSeconds=6"
    )
    request = urllib.request.Request(url, headers=localkube_api.auth_headers())
    with urllib.request.urlopen(
        request, timeout=10, context=localkube_api.ssl_context()
    ) as response:
        lines = [json.loads(line) for line in response.read().splitlines() if line.strip()]
    assert any(
        line["type"] == "BOOKMARK" and int(line["object"]["metadata"]["resourceVersion"]) > 0
        for line in lines
    )


def test_delete_collection_by_label(core, ns):
    for name, labels in (("a", {"x": "1"}), ("b", {"x": "1"}), ("c", {})):
        core.create_namespaced_config_map(ns, {"metadata": {"name": name, "labels": labels}})
    core.delete_collection_namespaced_config_map(ns, label_selector="x=1")
    assert [c.metadata.name for c in core.list_namespaced_config_map(ns).items] == ["c"]


def test_limit_range_maximum_is_enforced(core, ns):
    core.create_namespaced_limit_range(
        ns,
        {
            "metadata": {"name": "lr"},
            "spec": {"limits": [{"type": "Container", "max": {"cpu": "1"}}]},
        },
    )
    body = pod_body("big")
    body["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "2"}}
    with pytest.raises(ApiException) as error:
        core.create_namespaced_pod(ns, body)
    assert (
        status_of(error)["message"]
        == 'pods "big" is forbidden: maximum cpu usage per Container is 1, but limit is 2'
    )
