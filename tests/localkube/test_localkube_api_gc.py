"""Garbage collector passes on an in-process store (no server): event expiry, orphan sweep."""

from __future__ import annotations

from localkube.apiserver.gc import GarbageCollector
from localkube.apiserver.operations import ObjectApi
from localkube.apiserver.store import Store


def make_api(tmp_path) -> tuple[ObjectApi, GarbageCollector]:
    api = ObjectApi(Store(str(tmp_path / "store.db")))
    api.create("namespaces", "", {"metadata": {"name": "default"}})
    return api, GarbageCollector(api)


def test_events_older_than_an_hour_expire(tmp_path):
    api, collector = make_api(tmp_path)
    for name, stamp in (("old", "2020-01-01T00:00:00Z"), ("new", None)):
        event = {
            "metadata": {"name": name},
            "involvedObject": {"kind": "Pod", "name": "p"},
            "reason": "R",
            "message": "m",
        }
        if stamp:
            event["lastTimestamp"] = stamp
        api.create("events", "default", event)
    collector.expire_events()
    assert [e["metadata"]["name"] for e in api.list("events", "default")] == ["new"]


def test_sweep_removes_dependents_whose_owner_never_existed_but_keeps_foreign_owners(tmp_path):
    api, collector = make_api(tmp_path)
    gone = {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "no-such-uid"}
    foreign = {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "job-uid"}
    api.create("configmaps", "default", {"metadata": {"name": "orphan", "ownerReferences": [gone]}})
    api.create(
        "configmaps", "default", {"metadata": {"name": "foreign", "ownerReferences": [foreign]}}
    )
    collector.sweep_orphans()
    assert [c["metadata"]["name"] for c in api.list("configmaps", "default")] == ["foreign"]


def test_foreground_deletion_holds_the_owner_until_its_dependents_are_gone(tmp_path):
    from localkube.apiserver.operations import Propagation

    api, collector = make_api(tmp_path)
    owner = api.create("configmaps", "default", {"metadata": {"name": "owner"}})
    ref = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "owner",
        "uid": owner["metadata"]["uid"],
    }
    api.create(
        "configmaps",
        "default",
        {"metadata": {"name": "held", "ownerReferences": [ref], "finalizers": ["test/hold"]}},
    )
    api.create("secrets", "default", {"metadata": {"name": "plain", "ownerReferences": [ref]}})

    deleting = api.delete("configmaps", "default", "owner", propagation=Propagation.FOREGROUND)
    assert deleting["metadata"]["finalizers"] == ["foregroundDeletion"]
    assert collector.advance_foreground_deletions() is True
    assert api.list("secrets", "default") == []
    assert api.store.get("configmaps", "default", "owner") is not None

    api.patch(
        "configmaps",
        "default",
        "held",
        "application/merge-patch+json",
        {"metadata": {"finalizers": None}},
    )
    assert collector.advance_foreground_deletions() is False
    assert api.list("configmaps", "default") == []
