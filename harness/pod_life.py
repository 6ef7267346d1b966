"""Watching a job's pods in the API server's own order: who lived when, per gang (issue 15).

Why this exists: the restart tests (tests/pipeline/test_pipeline_restarts.py) must show
that no run ever has two gangs' pods alive at once. `PodLifeRecorder` lists
the job's pods once, then follows one watch stream resumed from its last
resourceVersion, so it sees every creation, graceful deletion and removal in
the order localkube numbered them.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any

from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from harness.pipeline_fixtures import NAMESPACE
from tfjob.naming import ANNOTATION_ATTEMPTS, LABEL_INDEX, LABEL_ROLE, job_selector

# --- watching the job's pods -----------------------------------------------------------------


@dataclass
class PodLife:
    """One pod object (one uid), from its first event to its removal."""

    uid: str
    name: str
    replica: str  # "worker-1", from the role and index labels
    gang: int  # 1 for the first gang; n for a gang of attempt n (its tfjob.io/attempts)
    created: str  # metadata.creationTimestamp
    born_rv: int  # resourceVersion of the first event seen
    died_rv: int | None = None  # resourceVersion of its DELETED event
    terminating: bool = False  # seen with a deletionTimestamp before it was gone
    grace: int | None = None  # metadata.deletionGracePeriodSeconds when seen terminating
    ip: str | None = None  # the last status.podIP seen
    node: str | None = None  # spec.nodeName once bound


def gang_of(pod: dict[str, Any]) -> int:
    """A pod's gang: the number of the last attempt in its `tfjob.io/attempts` annotation
    (set on every pod of a restarted gang, operators/restart.py), else 1."""
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_ATTEMPTS)
    if not text:
        return 1
    return int(json.loads(text)[-1]["number"])


class PodLifeRecorder(threading.Thread):
    """Watches the pods of one job (every run of it) while a DAG runs.

    How "no two gangs alive at once" is checked: localkube gives every write a
    resourceVersion from one counter and a watch delivers the events in that
    order. The recorder lists once (before the DAG starts), then keeps ONE
    watch going, each time resumed from the last resourceVersion it saw (never
    a relist, which could hide the order of a removal and a creation). A pod
    is alive from its first event (ADDED) to its DELETED event, which the API
    server emits only once the kubelet confirmed its containers ended (a pod
    deleted with a grace period stays, with a deletionTimestamp, until then).
    At each new uid, the recorder notes every alive pod of another gang in
    `overlaps`; the tests also compare resourceVersions: the last DELETED of
    gang 1 must come before the first ADDED of gang 2. A 410 (history too
    old) forces a relist: counted in `gaps`, and the tests require none.
    """

    def __init__(self, world, job: str) -> None:  # type: ignore[no-untyped-def]
        super().__init__(daemon=True, name=f"pods-of-{job}")
        self.api = world.kube.core_v1()
        self.job = job
        self.selector = job_selector(job)
        self.lives: dict[str, PodLife] = {}  # by uid
        self.overlaps: list[str] = []
        self.errors: list[str] = []
        self.gaps = 0
        self.listed = threading.Event()
        self.stopping = threading.Event()

    def alive(self) -> list[PodLife]:
        return [life for life in self.lives.values() if life.died_rv is None]

    def _see(self, kind: str, pod: dict[str, Any], rv: int) -> None:
        meta = pod["metadata"]
        uid = meta["uid"]
        life = self.lives.get(uid)
        if life is None:
            labels = meta.get("labels") or {}
            life = PodLife(
                uid=uid,
                name=meta["name"],
                replica=f"{labels.get(LABEL_ROLE)}-{labels.get(LABEL_INDEX)}",
                gang=gang_of(pod),
                created=meta.get("creationTimestamp", ""),
                born_rv=rv,
            )
            others = [o for o in self.alive() if o.gang != life.gang]
            if others:
                self.overlaps.append(
                    f"{life.name} (gang {life.gang}, uid {life.uid}, rv {rv}) created while "
                    + ", ".join(f"{o.name} (gang {o.gang}, uid {o.uid})" for o in others)
                    + " still existed"
                )
            self.lives[uid] = life
        if meta.get("deletionTimestamp"):
            life.terminating = True
            life.grace = meta.get("deletionGracePeriodSeconds")
        life.ip = (pod.get("status") or {}).get("podIP") or life.ip
        life.node = (pod.get("spec") or {}).get("nodeName") or life.node
        if kind == "DELETED":
            life.died_rv = rv

    def _relist(self) -> str:
        listing = self.api.list_namespaced_pod(NAMESPACE, label_selector=self.selector)
        rv = int(listing.metadata.resource_version)
        present = set()
        for item in listing.items:
            pod = self.api.api_client.sanitize_for_serialization(item)
            present.add(pod["metadata"]["uid"])
            self._see("LISTED", pod, rv)
        for life in self.alive():
            if life.uid not in present:
                life.died_rv = rv  # order against the new pods of this list unknown: a gap
        return listing.metadata.resource_version

    def run(self) -> None:
        rv: str | None = None
        while not self.stopping.is_set():
            try:
                if rv is None:
                    if self.listed.is_set():
                        self.gaps += 1
                    rv = self._relist()
                    self.listed.set()
                stream = watch.Watch()
                for event in stream.stream(
                    self.api.list_namespaced_pod,
                    NAMESPACE,
                    label_selector=self.selector,
                    resource_version=rv,
                    timeout_seconds=5,
                    _request_timeout=30,  # a stream the server never ends: resume from rv
                ):
                    if event["type"] not in ("ADDED", "MODIFIED", "DELETED"):
                        continue
                    pod = event["raw_object"]
                    rv = pod["metadata"]["resourceVersion"]
                    self._see(event["type"], pod, int(rv))
                    if self.stopping.is_set():
                        stream.stop()
            except ApiException as exc:
                if exc.status == 410:
                    rv = None
                    continue
                self.errors.append(f"{exc.status} {exc.reason}")
                self.stopping.wait(0.5)
            except Exception as exc:  # noqa: BLE001 - a busy API: resume from rv
                self.errors.append(f"{type(exc).__name__}: {exc}")
                self.stopping.wait(0.5)

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=30)

    def gangs(self) -> dict[int, list[PodLife]]:
        found: dict[int, list[PodLife]] = {}
        for life in sorted(self.lives.values(), key=lambda life: life.born_rv):
            found.setdefault(life.gang, []).append(life)
        return found

    def timeline(self) -> str:
        """What a failed assertion shows: every pod object, in the order it appeared."""
        return "\n".join(
            f"  gang {life.gang} {life.replica} uid={life.uid} created={life.created} "
            f"rv {life.born_rv}..{life.died_rv} terminating={life.terminating} "
            f"grace={life.grace} ip={life.ip}"
            for life in sorted(self.lives.values(), key=lambda life: life.born_rv)
        ) + (f"\n  watch errors: {self.errors[-5:]}" if self.errors else "")


def start_recorder(world, job: str) -> PodLifeRecorder:  # type: ignore[no-untyped-def]
    recorder = PodLifeRecorder(world, job)
    recorder.start()
    assert recorder.listed.wait(60), f"could not list the pods of {job}: {recorder.errors}"
    return recorder
