"""The Kubernetes objects of one run, through the provider's sync client.

Every object of a run carries the run's labels (docs/architecture.md), so a
label selector finds all of them: this is how a retried or cleared run removes
an earlier try's leftovers, how teardown and `on_kill` delete a run, and how
the launch task watches its gang. The selector names the run's `tfjob.io/run-hash`
(192 bits of its DAG and run id), not only its run key: another run whose key is
the same (a run id chosen to collide) never matches, and `find_foreign_objects`
lets launch refuse such a key instead of sharing names with the other run.
Deletes accept 404 (someone else was faster); waits use a Kubernetes watch
with a deadline, never a fixed sleep.
The waits ride out a blinking control plane (operators/transient.py): a 5xx,
429 or dropped connection while listing or watching is followed by a back-off
and a relist, until the wait's own deadline.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kubernetes import client as k8s
from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from operators.errors import PipelineError
from operators.transient import (
    API_BACKOFF,
    GONE_STATUS,
    call_with_retries,
    describe_api_error,
    is_transient,
)
from runtime.backoff import Backoff
from tfjob import naming
from tfjob.jsontypes import JsonObject

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunKind:
    """A kind of object a run has, and the client methods that list and delete it."""

    kind: str
    api: str  # the client serving it, as `tenancy.apply.Clients` names it: core, networking
    list: str
    list_all: str
    delete: str
    # None: the run's selector never deletes it; the garbage collector removes it with its
    # owner, the run's ConfigMap (tenancy.apply.create_run_network_policy).
    delete_collection: str | None


# Every kind of object a run has: the one list (the janitor's sweep, a run's removal).
RUN_KINDS = (
    RunKind(
        "Pod",
        "core",
        "list_namespaced_pod",
        "list_pod_for_all_namespaces",
        "delete_namespaced_pod",
        "delete_collection_namespaced_pod",
    ),
    RunKind(
        "ConfigMap",
        "core",
        "list_namespaced_config_map",
        "list_config_map_for_all_namespaces",
        "delete_namespaced_config_map",
        "delete_collection_namespaced_config_map",
    ),
    RunKind(
        "Secret",
        "core",
        "list_namespaced_secret",
        "list_secret_for_all_namespaces",
        "delete_namespaced_secret",
        "delete_collection_namespaced_secret",
    ),
    RunKind(
        "NetworkPolicy",
        "networking",
        "list_namespaced_network_policy",
        "list_network_policy_for_all_namespaces",
        "delete_namespaced_network_policy",
        None,
    ),
)
# The kinds the run's selector deletes, all served by the CoreV1Api the functions below take.
SELECTOR_KINDS = tuple(kind for kind in RUN_KINDS if kind.delete_collection is not None)

WATCH_CHUNK_SECONDS = 30
# After a wait's deadline: how long the last look at what is left may ride out a blink.
LAST_LOOK_SECONDS = 30.0
# Kubernetes' default terminationGracePeriodSeconds, for a pod whose spec has none.
DEFAULT_GRACE_SECONDS = 30


def to_plain(api: k8s.CoreV1Api, obj: object) -> JsonObject:
    """A client model as the API's camelCase dict."""
    if isinstance(obj, dict):
        return obj
    return api.api_client.sanitize_for_serialization(obj)


def list_run_pods(api: k8s.CoreV1Api, namespace: str, selector: str) -> list[JsonObject]:
    pods = api.list_namespaced_pod(namespace, label_selector=selector).items
    return [to_plain(api, p) for p in pods]


def list_run_objects(
    api: k8s.CoreV1Api, namespace: str, selector: str, *, kinds: Iterable[str] | None = None
) -> list[str]:
    """`Kind/name` of every object of the run that still exists (of `kinds` when given)."""
    found = []
    for run_kind in SELECTOR_KINDS:
        if kinds is not None and run_kind.kind not in kinds:
            continue
        for item in getattr(api, run_kind.list)(namespace, label_selector=selector).items:
            found.append(f"{run_kind.kind}/{item.metadata.name}")
    return sorted(found)


def list_runs_holding_objects(api: k8s.CoreV1Api, namespace: str, tenant: str) -> set[str]:
    """Run keys of the tenant's runs that still have a pod, ConfigMap or Secret in namespace."""
    selector = (
        f"{naming.LABEL_MANAGED_BY}={naming.MANAGED_BY},"
        f"{naming.LABEL_TENANT}={naming.label_value(tenant)},{naming.LABEL_RUN}"
    )
    holders = set()
    for run_kind in SELECTOR_KINDS:
        for item in getattr(api, run_kind.list)(namespace, label_selector=selector).items:
            holders.add(item.metadata.labels[naming.LABEL_RUN])
    return holders


def delete_run_objects(
    api: k8s.CoreV1Api,
    namespace: str,
    selector: str,
    grace_period_seconds: int | None = None,
    *,
    kinds: Iterable[str] | None = None,
) -> list[str]:
    """Delete every pod, ConfigMap and Secret matching `selector` (only `kinds`, e.g.
    ("Pod",), when given); return `Kind/name` of each.

    One `deletecollection` by the selector per kind, not a list and a DELETE per object
    (a 1,024-pod gang took 1,024 round trips to delete): the API server deletes each
    match as a DELETE would, pods with their own grace period unless
    `grace_period_seconds` is given, and answers with the objects it deleted.
    """
    wanted = None if kinds is None else frozenset(kinds)
    deleted = []
    for run_kind in SELECTOR_KINDS:
        if wanted is not None and run_kind.kind not in wanted:
            continue
        kwargs: dict[str, object] = {"label_selector": selector, "_preload_content": False}
        if run_kind.kind == "Pod" and grace_period_seconds is not None:
            kwargs["grace_period_seconds"] = grace_period_seconds
        answer = getattr(api, run_kind.delete_collection)(namespace, **kwargs)
        # The client would read the answer (a list) as a Status and lose the names.
        items = json.loads(answer.data or b"{}").get("items") or []
        deleted += sorted(f"{run_kind.kind}/{item['metadata']['name']}" for item in items)
    return deleted


def longest_grace_period(pods: Iterable[JsonObject]) -> int:
    """The longest grace period (seconds) the kubelet gives any of these pods to end."""
    longest = 0
    for pod in pods:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        grace = meta.get("deletionGracePeriodSeconds")
        if grace is None:
            grace = spec.get("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS)
        longest = max(longest, int(grace or 0))
    return longest


def _pause_after(exc: BaseException, backoff: Backoff, deadline: float, what: str) -> bool:
    """Sleep before the next try after a transient `exc`; False when the deadline has come."""
    left = deadline - backoff.policy.now()
    if left <= 0:
        log.warning("%s: %s at the deadline; giving up", what, describe_api_error(exc))
        return False
    delay = min(backoff.next_delay(), left)
    log.warning("%s: %s (transient); relisting in %.1fs", what, describe_api_error(exc), delay)
    backoff.policy.pause(delay)
    return True


def await_run_objects_gone(
    api: k8s.CoreV1Api,
    namespace: str,
    selector: str,
    timeout: float,
    *,
    kinds: Iterable[str] | None = None,
) -> list[str]:
    """Wait until no object of the run (of `kinds` when given) is left; return what is
    still there at the deadline.

    Pods go away only after their grace period (on a real cluster, once the
    kubelet confirmed their containers ended), so they are watched; ConfigMaps
    and Secrets vanish on delete and are checked once at the end.
    """
    kinds = None if kinds is None else tuple(kinds)
    deadline = time.monotonic() + timeout
    backoff = API_BACKOFF.schedule()
    what = f"waiting for the objects of {selector} to go"
    while True:
        try:
            listing = api.list_namespaced_pod(namespace, label_selector=selector)
            backoff.reset()
            remaining = {p.metadata.name for p in listing.items}
            if not remaining:
                break
            left = deadline - time.monotonic()
            if left <= 0:
                break
            stream = watch.Watch()
            for event in stream.stream(
                api.list_namespaced_pod,
                namespace,
                label_selector=selector,
                resource_version=listing.metadata.resource_version,
                timeout_seconds=max(1, int(min(left, WATCH_CHUNK_SECONDS))),
            ):
                if event["type"] == "DELETED":
                    remaining.discard(event["object"].metadata.name)
                if not remaining or time.monotonic() >= deadline:
                    stream.stop()
            # Loop: relist, so a watch that ended early or missed an event cannot mislead us.
        except Exception as exc:
            if getattr(exc, "status", None) == GONE_STATUS:
                continue  # 410 Gone: our resourceVersion is too old; relist at once
            if not is_transient(exc):
                raise
            if not _pause_after(exc, backoff, deadline, what):
                break
    return call_with_retries(
        lambda: list_run_objects(api, namespace, selector, kinds=kinds),
        deadline=max(deadline, time.monotonic()) + LAST_LOOK_SECONDS,
        what=f"listing what is left of {selector}",
        log=log,
    )


def watch_run_pods(
    api: k8s.CoreV1Api,
    namespace: str,
    selector: str,
    deadline: float,
    is_done: Callable[[list[JsonObject]], bool],
) -> list[JsonObject]:
    """Watch the run's pods until `is_done(pods)` or the monotonic `deadline`.

    Returns the last pods seen. A transient API failure (operators/transient.py)
    is followed by a back-off and a relist; one still failing at the deadline
    leaves the last pods seen as the answer.
    """
    pods: dict[str, JsonObject] = {}
    backoff = API_BACKOFF.schedule()
    while True:
        try:
            listing = api.list_namespaced_pod(namespace, label_selector=selector)
            backoff.reset()
            pods = {p.metadata.name: to_plain(api, p) for p in listing.items}
            if is_done(list(pods.values())):
                return list(pods.values())
            left = deadline - time.monotonic()
            if left <= 0:
                return list(pods.values())
            stream = watch.Watch()
            finished = False
            for event in stream.stream(
                api.list_namespaced_pod,
                namespace,
                label_selector=selector,
                resource_version=listing.metadata.resource_version,
                timeout_seconds=max(1, int(min(left, WATCH_CHUNK_SECONDS))),
            ):
                raw = event.get("raw_object") or to_plain(api, event["object"])
                name = raw["metadata"]["name"]
                if event["type"] == "DELETED":
                    pods.pop(name, None)
                else:
                    pods[name] = raw
                if is_done(list(pods.values())):
                    finished = True
                    stream.stop()
                elif time.monotonic() >= deadline:
                    stream.stop()
            if finished:
                return list(pods.values())
        except Exception as exc:
            if getattr(exc, "status", None) == GONE_STATUS:
                continue  # 410 Gone: our resourceVersion is too old; relist at once
            if not is_transient(exc):
                raise
            if not _pause_after(exc, backoff, deadline, f"watching the pods of {selector}"):
                return list(pods.values())


def list_pod_events(api: k8s.CoreV1Api, namespace: str, pod: str) -> list[JsonObject]:
    events = api.list_namespaced_event(namespace, field_selector=f"involvedObject.name={pod}").items
    return [to_plain(api, e) for e in events]


class ForeignObjectError(PipelineError, RuntimeError):
    """Objects named or labelled like this run's belong to another run: left alone."""

    def __init__(self, run_key: str, foreign: list[str]) -> None:
        self.run_key = run_key
        self.foreign = foreign
        super().__init__(
            f"run key {run_key}: {', '.join(foreign)} carry this key but belong to another "
            f"run; they are left alone and this run cannot use the key: trigger it again "
            f"with another run id"
        )


def names_run(meta: k8s.V1ObjectMeta | JsonObject, dag_id: str, run_id: str) -> bool:
    """Do an object's labels and annotations (a client model's metadata, or a dict) name
    this run: its `tfjob.io/run-hash` label and its dag-id and run-id annotations?"""
    read = meta.get if isinstance(meta, dict) else lambda key: getattr(meta, key, None)
    labels = read("labels") or {}
    annotations = read("annotations") or {}
    return (
        labels.get(naming.LABEL_RUN_HASH) == naming.run_hash(dag_id, run_id)
        and annotations.get(naming.ANNOTATION_DAG_ID) == dag_id
        and annotations.get(naming.ANNOTATION_RUN_ID) == run_id
    )


def find_foreign_objects(
    api: k8s.CoreV1Api, namespace: str, run_key: str, dag_id: str, run_id: str
) -> list[str]:
    """`Kind/name (dag …, run …)` of each object labelled with `run_key` that is not the
    run's own (`names_run`): one list per kind."""
    foreign = []
    for run_kind in SELECTOR_KINDS:
        listing = getattr(api, run_kind.list)(
            namespace, label_selector=naming.run_selector(run_key)
        )
        for item in listing.items:
            if not names_run(item.metadata, dag_id, run_id):
                notes = item.metadata.annotations or {}
                foreign.append(
                    f"{run_kind.kind}/{item.metadata.name} "
                    f"(dag {notes.get(naming.ANNOTATION_DAG_ID)}, "
                    f"run {notes.get(naming.ANNOTATION_RUN_ID)})"
                )
    return sorted(foreign)


def create_objects(api: k8s.CoreV1Api, namespace: str, bodies: Iterable[JsonObject]) -> list[str]:
    """Create ConfigMaps and Secrets given as dicts; an existing one of the same run is
    replaced, one of another run (same name: a run key collision) refused with
    ForeignObjectError."""
    made = []
    for body in bodies:
        kind = body["kind"]
        name = body["metadata"]["name"]
        create, read, replace = {
            "ConfigMap": (
                api.create_namespaced_config_map,
                api.read_namespaced_config_map,
                api.replace_namespaced_config_map,
            ),
            "Secret": (
                api.create_namespaced_secret,
                api.read_namespaced_secret,
                api.replace_namespaced_secret,
            ),
        }[kind]
        try:
            create(namespace, body)
        except ApiException as exc:
            if exc.status != 409:
                raise
            notes = body["metadata"].get("annotations") or {}
            dag_id = notes.get(naming.ANNOTATION_DAG_ID, "")
            run_id = notes.get(naming.ANNOTATION_RUN_ID, "")
            if not names_run(read(name, namespace).metadata, dag_id, run_id):
                raise ForeignObjectError(
                    body["metadata"]["labels"][naming.LABEL_RUN], [f"{kind}/{name}"]
                ) from None
            replace(name, namespace, body)
        made.append(f"{kind}/{name}")
    return made


@dataclass(frozen=True)
class ExecResult:
    """What a command run by exec left: its output and exit code (None: it did not finish)."""

    stdout: str
    stderr: str
    returncode: int | None


def exec_in_container(
    api: k8s.CoreV1Api,
    namespace: str,
    pod: str,
    container: str,
    command: list[str],
    timeout: float,
) -> ExecResult:
    """Run `command` in a running container (no stdin, no tty) and wait up to `timeout` s.

    `kubernetes.stream.stream` swaps the client's `request` method during the
    call: callers running execs in parallel give each thread its own client.
    """
    from kubernetes.stream import stream as kubernetes_stream

    resp = kubernetes_stream(
        api.connect_get_namespaced_pod_exec,
        pod,
        namespace,
        command=command,
        container=container,
        stdin=False,
        stdout=True,
        stderr=True,
        tty=False,
        _preload_content=False,
    )
    try:
        resp.run_forever(timeout=timeout)
        stdout = resp.read_stdout() if resp.peek_stdout() else ""
        stderr = resp.read_stderr() if resp.peek_stderr() else ""
        return ExecResult(stdout, stderr, resp.returncode)
    finally:
        resp.close()
