"""The ClusterSpec and each replica's TF_CONFIG, built from collected pod endpoints.

Pod IPs are only known once pods run, so Airflow collects `(role, index, ip,
port)` endpoints, builds the ClusterSpec here and delivers one `cluster.json`
per replica (see docs/architecture.md, "The pod protocol"). This module is the
one ClusterSpec builder: it is strict (missing, duplicate or unexpected
replicas are errors, never guessed around) and deterministic (roles in Role
order, tasks in index order).

The evaluator is left out of the `cluster` of every TF_CONFIG: TensorFlow
treats it as independent of the training cluster (multi_worker_util allows a
task of type "evaluator" that is absent from the cluster), and a training
cluster that names it would wait for a task that never joins training. The
legacy TF1 variables follow the same rule: they list the whole training
cluster (CHIEF_HOSTS too when there is a chief), never the evaluator.
"""

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from runtime.clusterenv import derive_legacy_env
from tfjob.errors import TfjobError
from tfjob.jsontypes import JsonObject
from tfjob.request.model import ChiefTaskType, Role, TrainingRequest

# Roles that form the training cluster in TF_CONFIG["cluster"].
TRAINING_ROLES = (Role.CHIEF, Role.PS, Role.WORKER)


class ClusterSpecError(TfjobError):
    """Endpoints that cannot form the ClusterSpec the request asks for."""


@dataclass(frozen=True)
class Endpoint:
    """Where one replica's TensorFlow server listens."""

    role: Role
    index: int
    ip: str
    port: int

    @property
    def address(self) -> str:
        """`ip:port`, with IPv6 addresses in brackets."""
        host = f"[{self.ip}]" if ":" in self.ip else self.ip
        return f"{host}:{self.port}"


def _check_endpoint(endpoint: Endpoint) -> Endpoint:
    where = f"endpoint {endpoint.role}-{endpoint.index}"
    try:
        role = Role(endpoint.role)
    except ValueError:
        raise ClusterSpecError(
            f"{where}: role {endpoint.role!r} given; allowed: {', '.join(r.value for r in Role)}"
        ) from None
    if (
        isinstance(endpoint.index, bool)
        or not isinstance(endpoint.index, int)
        or endpoint.index < 0
    ):
        raise ClusterSpecError(
            f"{where}: index {endpoint.index!r} given; allowed: an integer of 0 or more"
        )
    try:
        ipaddress.ip_address(endpoint.ip)
    except ValueError:
        raise ClusterSpecError(
            f"{where}: ip {endpoint.ip!r} given; allowed: an IPv4 or IPv6 address"
        ) from None
    if (
        isinstance(endpoint.port, bool)
        or not isinstance(endpoint.port, int)
        or not 1 <= endpoint.port <= 65535
    ):
        raise ClusterSpecError(f"{where}: port {endpoint.port!r} given; allowed: 1 to 65535")
    return Endpoint(role, endpoint.index, endpoint.ip, endpoint.port)


def build_cluster_spec(
    request: TrainingRequest, endpoints: Iterable[Endpoint]
) -> dict[str, list[str]]:
    """role -> ["ip:port", ...] for every replica of the request, in Role and index order.

    Only roles with replicas appear. Raises ClusterSpecError on unknown roles,
    invalid addresses, duplicate or missing indices and counts that differ
    from the request.
    """
    by_role: dict[Role, dict[int, Endpoint]] = {role: {} for role in Role}
    for raw in endpoints:
        endpoint = _check_endpoint(raw)
        expected = request.replica_count(endpoint.role)
        if expected == 0:
            raise ClusterSpecError(
                f"endpoint {endpoint.role}-{endpoint.index}: the request "
                f"has no {endpoint.role} replicas"
            )
        if endpoint.index >= expected:
            raise ClusterSpecError(
                f"endpoint {endpoint.role}-{endpoint.index}: index "
                f"{endpoint.index} given; the request has {expected} "
                f"{endpoint.role} replica(s), indices 0-{expected - 1}"
            )
        seen = by_role[endpoint.role]
        if endpoint.index in seen:
            raise ClusterSpecError(
                f"endpoint {endpoint.role}-{endpoint.index}: given twice "
                f"({seen[endpoint.index].address} and {endpoint.address})"
            )
        seen[endpoint.index] = endpoint
    cluster: dict[str, list[str]] = {}
    for role in Role:
        expected = request.replica_count(role)
        if expected == 0:
            continue
        missing = [index for index in range(expected) if index not in by_role[role]]
        if missing:
            raise ClusterSpecError(
                f"{role}: {len(by_role[role])} of {expected} endpoints given; missing "
                f"{', '.join(f'{role}-{index}' for index in missing)}"
            )
        cluster[role.value] = [by_role[role][index].address for index in range(expected)]
    return cluster


def _check_task(cluster: Mapping[str, list[str]], role: Role, index: int) -> Role:
    try:
        role = Role(role)
    except ValueError:
        raise ClusterSpecError(
            f"task role {role!r} given; allowed: {', '.join(r.value for r in Role)}"
        ) from None
    tasks = cluster.get(role.value, [])
    if not 0 <= index < len(tasks):
        raise ClusterSpecError(
            f"task {role}-{index} given; the cluster has {len(tasks)} {role} task(s)"
        )
    return role


def build_tf_config(
    cluster: Mapping[str, list[str]],
    role: Role,
    index: int,
    chief_task_type: ChiefTaskType = ChiefTaskType.CHIEF,
) -> JsonObject:
    """TF_CONFIG of one replica: the training cluster and this replica's task.

    The chief's cluster key and task type are `chief_task_type` (Kubeflow TFJob's
    `Master` replicas are `master` in the TF_CONFIG its operator gives).
    """
    role = _check_task(cluster, role, index)

    def task_type(r: Role) -> str:
        return ChiefTaskType(chief_task_type).value if r is Role.CHIEF else r.value

    training = {
        task_type(r): list(cluster[r.value]) for r in TRAINING_ROLES if cluster.get(r.value)
    }
    return {"cluster": training, "task": {"type": task_type(role), "index": index}}


def build_legacy_env(cluster: Mapping[str, list[str]], role: Role, index: int) -> dict[str, str]:
    """TF1-style variables for one replica, describing the whole training cluster.

    PS_HOSTS and WORKER_HOSTS (comma-joined; empty when the job has none),
    CHIEF_HOSTS only when the job has a chief, JOB_NAME and TASK_INDEX. With
    JOB_NAME=chief a TF1 program builds `ClusterSpec({"chief": CHIEF_HOSTS,
    "ps": PS_HOSTS, "worker": WORKER_HOSTS})`, which names its own task. The
    evaluator gets the same host lists (it reaches the training cluster as a
    client) and JOB_NAME=evaluator, a job none of them names, as in TF_CONFIG.
    The pod derives them from its TF_CONFIG the same way (runtime/clusterenv.py).
    """
    return derive_legacy_env(build_tf_config(cluster, role, index))


def build_cluster_files(
    request: TrainingRequest, endpoints: Iterable[Endpoint]
) -> dict[tuple[Role, int], JsonObject]:
    """Per replica, the content of its cluster.json: {"tf_config": ...}.

    The TF1-style variables are not sent: the pod derives them from TF_CONFIG
    (runtime/clusterenv.py), so each file carries the cluster once.
    """
    cluster = build_cluster_spec(request, endpoints)
    return {
        (role, index): {"tf_config": build_tf_config(cluster, role, index, request.chief_task_type)}
        for role, index in request.replicas_in_order()
    }


def parse_address(address: str) -> tuple[str, int]:
    """("ip", port) from "ip:port" or "[ipv6]:port"; ClusterSpecError when malformed."""
    if not isinstance(address, str):
        raise ClusterSpecError(f'address {address!r} given; allowed: "ip:port"')
    if address.startswith("["):
        host, sep, port = address[1:].partition("]:")
    else:
        host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ClusterSpecError(f'address {address!r} given; allowed: "ip:port" or "[ipv6]:port"')
    return host, int(port)


def endpoints_from_mapping(mapping: Mapping[str, list[str]]) -> list[Endpoint]:
    """Endpoints from the XCom form {role: ["ip:port", ...]} (index = list position)."""
    endpoints = []
    for role_name, addresses in mapping.items():
        try:
            role = Role(role_name)
        except ValueError:
            raise ClusterSpecError(
                f"role {role_name!r} given; allowed: {', '.join(r.value for r in Role)}"
            ) from None
        if isinstance(addresses, str) or not isinstance(addresses, list | tuple):
            raise ClusterSpecError(f'{role}: {addresses!r} given; allowed: a list of "ip:port"')
        for index, address in enumerate(addresses):
            ip, port = parse_address(address)
            endpoints.append(_check_endpoint(Endpoint(role, index, ip, port)))
    return sorted(endpoints, key=lambda e: (list(Role).index(e.role), e.index))


def endpoints_to_mapping(endpoints: Iterable[Endpoint]) -> dict[str, list[str]]:
    """The XCom form {role: ["ip:port", ...]} in Role and index order.

    Indices must run 0..n-1 per role, as the list position is the index.
    """
    by_role: dict[Role, dict[int, str]] = {}
    for raw in endpoints:
        endpoint = _check_endpoint(raw)
        seen = by_role.setdefault(endpoint.role, {})
        if endpoint.index in seen:
            raise ClusterSpecError(f"endpoint {endpoint.role}-{endpoint.index}: given twice")
        seen[endpoint.index] = endpoint.address
    mapping: dict[str, list[str]] = {}
    for role in Role:
        if role not in by_role:
            continue
        indices = by_role[role]
        missing = [index for index in range(max(indices) + 1) if index not in indices]
        if missing:
            raise ClusterSpecError(
                f"{role}: missing {', '.join(f'{role}-{index}' for index in missing)}"
            )
        mapping[role.value] = [indices[index] for index in range(len(indices))]
    return mapping
