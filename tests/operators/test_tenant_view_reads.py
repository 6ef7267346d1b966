"""The tenants page reads Kubernetes at most once per kind per 2 s, whatever the callers."""

from __future__ import annotations

import threading
from typing import Any

from runview.live import LiveReads
from runview.tenants import TenantsView


class FakeList:
    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items


class FakeCoreV1:
    """The two cluster-wide listings the page makes, counted."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def list_pod_for_all_namespaces(self, label_selector: str) -> FakeList:
        self.calls.append(f"pods {label_selector}")
        return FakeList([{"metadata": {"name": "p", "namespace": "tfjob-a"}}])

    def list_resource_quota_for_all_namespaces(self) -> FakeList:
        self.calls.append("quotas")
        return FakeList(
            [
                {"metadata": {"name": "tfjob-quota", "namespace": "tfjob-a"}},
                {"metadata": {"name": "someone-elses", "namespace": "tfjob-a"}},
            ]
        )


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def unused_reader(*_args: Any) -> Any:
    raise AssertionError("the tenants page reads no run's pods or logs")


def test_many_open_pages_share_one_listing_of_each_kind_per_two_seconds():
    api, clock = FakeCoreV1(), Clock()
    view = TenantsView(LiveReads(unused_reader, unused_reader, clock=clock), lambda: api)
    threads = [threading.Thread(target=view.read_cluster) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert api.calls == ["pods app.kubernetes.io/managed-by=tfjob", "quotas"]
    clock.now += 1.9
    pods, quotas, error = view.read_cluster()
    assert len(api.calls) == 2 and error is None
    assert list(quotas) == ["tfjob-a"] and quotas["tfjob-a"]["metadata"]["name"] == "tfjob-quota"
    clock.now += 0.2
    view.read_cluster()
    assert len(api.calls) == 4


def test_a_kubernetes_failure_is_said_on_the_page_not_raised():
    def broken() -> Any:
        raise ConnectionRefusedError("no cluster")

    view = TenantsView(LiveReads(unused_reader, unused_reader), broken)
    assert view.read_cluster() == ([], {}, "Kubernetes could not be read: ConnectionRefusedError")
