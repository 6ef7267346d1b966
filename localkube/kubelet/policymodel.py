"""What NetworkPolicies allow one pod, as data: Kubernetes' semantics, no I/O.

`compute_pod_rules(pod, view, forwards)` reads the store's pods, namespaces and
NetworkPolicies (networking.k8s.io/v1) and answers, per direction, whether the
pod is isolated and which peers and ports it may talk to; nftables.py turns that
into the pod's rules. The rules of Kubernetes kept here:

- a pod selected by no policy of a type (Ingress, Egress) is unrestricted for
  that type; selected by any, it allows only what some selecting policy's rules
  allow (policies add up; there is no deny rule);
- `policyTypes` absent means Ingress, plus Egress when the policy has `egress`;
- a rule with no `from`/`to` allows every peer, with no `ports` every port; a
  peer is an `ipBlock` (cidr minus `except`), or pods: `podSelector` alone picks
  in the policy's namespace, `namespaceSelector` alone every pod of the matching
  namespaces, both together the matching pods of the matching namespaces;
- a port is a protocol (TCP by default, UDP, SCTP) with a number, a number and
  `endPort`, a name (a containerPort's name: resolved on the pod itself for
  ingress, on each destination pod for egress) or none (every port);
- an empty selector matches everything; a selector this module cannot read
  matches nothing as a peer, and selects every pod of its namespace as a
  policy's `podSelector`; a policy of any other unreadable shape isolates every
  pod of its namespace and allows nothing (closed, not open).

Peers are pods with an IP that are not finished, not on the host's network, and
run on a node with real networking (simulated nodes' pods have no network). A
peer pod is known by its IP and its eth0 MAC, which the kubelet derives from the
pod's uid (`pod_mac_address`): a pod that later gets the same IP has another MAC,
so stale ingress rules elsewhere never let it in.

A forward (the pod's 127.0.0.1:PORT relayed to a host address, localkube/
forwarding.py) counts as reaching its target address and port: it is open when
the pod's egress is unrestricted or some egress rule allows TCP to that port with
no `to`, or with an ipBlock holding the target address.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from localkube.forwarding import Forward

ALL_PORTS = (1, 65535)


class Direction(StrEnum):
    INGRESS = "Ingress"
    EGRESS = "Egress"


class Protocol(StrEnum):
    TCP = "TCP"
    UDP = "UDP"
    SCTP = "SCTP"


@dataclass(frozen=True, order=True)
class PortRange:
    """Ports first..last of one protocol."""

    protocol: Protocol
    first: int
    last: int


@dataclass(frozen=True, order=True)
class PodPeer:
    ip: str
    mac: str


@dataclass(frozen=True)
class AddressBlock:
    """An ipBlock: `cidr` except the `excepts` ranges."""

    cidr: str
    excepts: tuple[str, ...] = ()

    def holds(self, address: str) -> bool:
        ip = ipaddress.ip_address(address)
        net = ipaddress.ip_network(self.cidr, strict=False)
        if ip.version != net.version or ip not in net:
            return False
        return not any(ip in ipaddress.ip_network(e, strict=False) for e in self.excepts)


@dataclass(frozen=True)
class Allowance:
    """One rule's worth of allowed traffic: peers (any, pods, blocks) on ports (None: all)."""

    any_peer: bool = False
    pods: tuple[PodPeer, ...] = ()
    blocks: tuple[AddressBlock, ...] = ()
    ports: tuple[PortRange, ...] | None = None


@dataclass(frozen=True)
class DirectionRules:
    isolated: bool = False
    allowances: tuple[Allowance, ...] = ()


@dataclass(frozen=True)
class ForwardVerdict:
    pod_port: int
    allowed: bool


@dataclass(frozen=True)
class PodRules:
    """What one pod may receive and send; `forwards` say which forwarded ports it may use."""

    ingress: DirectionRules = DirectionRules()
    egress: DirectionRules = DirectionRules()
    forwards: tuple[ForwardVerdict, ...] = ()

    @property
    def restricted(self) -> bool:
        return self.ingress.isolated or self.egress.isolated


@dataclass(frozen=True)
class ClusterView:
    """The objects the policies are evaluated against (pods already filtered to peers' nodes)."""

    pods: Sequence[Mapping[str, Any]] = ()
    namespaces: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # name -> labels
    policies: Sequence[Mapping[str, Any]] = ()


def pod_mac_address(pod_uid: str) -> str:
    """The MAC of a pod's eth0: locally administered, unicast, from the pod's uid."""
    digest = hashlib.sha256(pod_uid.encode()).digest()
    return ":".join(f"{b:02x}" for b in (0x02, *digest[:5]))


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A LabelSelector (matchLabels and matchExpressions) against labels; {} matches all."""
    if not isinstance(selector, Mapping):
        raise ValueError(f"selector: {selector!r} given; a mapping is required")
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression.get("key"), expression.get("operator")
        values = expression.get("values") or []
        if not isinstance(values, list):
            raise ValueError(f"matchExpressions values: {values!r} given; a list is required")
        if operator == "In":
            ok = key in labels and labels[key] in values
        elif operator == "NotIn":
            ok = key not in labels or labels[key] not in values
        elif operator == "Exists":
            ok = key in labels
        elif operator == "DoesNotExist":
            ok = key not in labels
        else:
            raise ValueError(
                f"matchExpressions operator: {operator!r} given; allowed In, NotIn, Exists, "
                "DoesNotExist"
            )
        if not ok:
            return False
    return True


def peer_selects(selector: Any, labels: Mapping[str, str]) -> bool:
    try:
        return selector_matches(selector, labels)
    except ValueError:
        return False


def labels_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def namespace_of(obj: Mapping[str, Any]) -> str:
    return (obj.get("metadata") or {}).get("namespace") or "default"


def namespace_labels(view: ClusterView, name: str) -> Mapping[str, str]:
    """A namespace's labels; `kubernetes.io/metadata.name` is always there, as in Kubernetes."""
    return {**(view.namespaces.get(name) or {}), "kubernetes.io/metadata.name": name}


def is_peer_pod(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status") or {}
    if not status.get("podIP") or status.get("phase") in ("Succeeded", "Failed"):
        return False
    return not (pod.get("spec") or {}).get("hostNetwork")  # Kubernetes: undefined; never here


def policy_types(policy: Mapping[str, Any]) -> set[Direction]:
    spec = policy.get("spec") or {}
    given = spec.get("policyTypes")
    if given is not None and not isinstance(given, list):
        raise ValueError(f"policyTypes: {given!r} given; a list of Ingress, Egress is required")
    if given:
        return {Direction(t) for t in given if t in Direction.__members__.values()}
    types = {Direction.INGRESS}
    if "egress" in spec:
        types.add(Direction.EGRESS)
    return types


def policy_selects(policy: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    if namespace_of(policy) != namespace_of(pod):
        return False
    try:
        return selector_matches((policy.get("spec") or {}).get("podSelector", {}), labels_of(pod))
    except ValueError:
        return True  # closed: an unreadable podSelector isolates the whole namespace


def select_peer_pods(
    entry: Mapping[str, Any], policy_namespace: str, view: ClusterView
) -> list[Mapping[str, Any]]:
    """The pods one `from`/`to` entry with podSelector and/or namespaceSelector picks."""
    pod_selector = entry.get("podSelector")
    ns_selector = entry.get("namespaceSelector")
    chosen = []
    for pod in view.pods:
        if not is_peer_pod(pod):
            continue
        ns = namespace_of(pod)
        if ns_selector is None:
            if ns != policy_namespace:
                continue
        elif not peer_selects(ns_selector, namespace_labels(view, ns)):
            continue
        if pod_selector is not None and not peer_selects(pod_selector, labels_of(pod)):
            continue
        chosen.append(pod)
    return chosen


def read_block(entry: Mapping[str, Any]) -> AddressBlock | None:
    block = entry.get("ipBlock") or {}
    try:
        cidr = str(ipaddress.ip_network(str(block.get("cidr")), strict=False))
        excepts = tuple(
            str(ipaddress.ip_network(str(e), strict=False)) for e in block.get("except") or []
        )
    except ValueError:
        return None  # an unreadable block allows nothing
    return AddressBlock(cidr, excepts)


def container_ports(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    spec = pod.get("spec") or {}
    return [
        port
        for container in (spec.get("containers") or []) + (spec.get("initContainers") or [])
        for port in (container.get("ports") or [])
    ]


def resolve_ports(
    ports: Iterable[Mapping[str, Any]] | None, destination: Mapping[str, Any] | None
) -> tuple[PortRange, ...] | None:
    """A rule's ports as ranges (None: every port). Named ports resolve on `destination`
    (None: nowhere, so they match nothing)."""
    ports = list(ports or [])
    if not ports:
        return None
    ranges = []

    def add(protocol: Protocol, first: Any, last: Any) -> None:
        # a number outside 1..65535 or a range ending before it starts matches nothing
        if all(type(v) is int for v in (first, last)) and 1 <= first <= last <= 65535:
            ranges.append(PortRange(protocol, first, last))

    for port in ports:
        try:
            protocol = Protocol(port.get("protocol") or "TCP")
        except ValueError:
            continue
        number = port.get("port")
        if number is None:
            add(protocol, *ALL_PORTS)
        elif isinstance(number, int):
            end = port.get("endPort")
            add(protocol, number, number if end is None else end)
        elif isinstance(number, str) and number.isdigit():
            add(protocol, int(number), int(number))
        elif isinstance(number, str) and destination is not None:
            for declared in container_ports(destination):
                declared_protocol = declared.get("protocol") or "TCP"
                if declared.get("name") == number and declared_protocol == protocol.value:
                    value = declared.get("containerPort")
                    add(protocol, value, value)
    return tuple(sorted(set(ranges)))


def has_named_port(ports: Iterable[Mapping[str, Any]] | None) -> bool:
    return any(isinstance(p.get("port"), str) and not p["port"].isdigit() for p in (ports or []))


def peer_of(pod: Mapping[str, Any]) -> PodPeer:
    return PodPeer(pod["status"]["podIP"], pod_mac_address(pod["metadata"]["uid"]))


def build_allowances(
    rule: Mapping[str, Any],
    direction: Direction,
    policy_namespace: str,
    pod: Mapping[str, Any],
    view: ClusterView,
) -> list[Allowance]:
    """One ingress/egress rule of a policy selecting `pod`, as allowances."""
    peers_key = "from" if direction is Direction.INGRESS else "to"
    entries = rule.get(peers_key) or []
    ports = rule.get("ports")
    any_peer = not entries
    blocks: list[AddressBlock] = []
    pods: dict[str, Mapping[str, Any]] = {}
    for entry in entries:
        if "ipBlock" in entry:
            block = read_block(entry)
            if block is not None:
                blocks.append(block)
        elif "podSelector" in entry or "namespaceSelector" in entry:
            for peer in select_peer_pods(entry, policy_namespace, view):
                pods[peer["metadata"]["uid"]] = peer
    if direction is Direction.INGRESS or not has_named_port(ports):
        resolved = resolve_ports(ports, pod if direction is Direction.INGRESS else None)
        if resolved == ():
            return []
        return [
            Allowance(
                any_peer=any_peer,
                pods=tuple(sorted({peer_of(p) for p in pods.values()})),
                blocks=tuple(blocks),
                ports=resolved,
            )
        ]
    # egress with named ports: each destination pod resolves the names on its own containers
    candidates = [p for p in view.pods if is_peer_pod(p)] if any_peer else list(pods.values())
    allowances = []
    for destination in candidates:
        resolved = resolve_ports(ports, destination)
        if resolved:
            allowances.append(Allowance(pods=(peer_of(destination),), ports=resolved))
    return allowances


def compute_direction(
    pod: Mapping[str, Any], view: ClusterView, direction: Direction
) -> DirectionRules:
    key = "ingress" if direction is Direction.INGRESS else "egress"
    isolated = False
    allowances: list[Allowance] = []
    for policy in view.policies:
        try:
            if direction not in policy_types(policy) or not policy_selects(policy, pod):
                continue
            found = [
                allowance
                for rule in (policy.get("spec") or {}).get(key) or []
                for allowance in build_allowances(rule, direction, namespace_of(policy), pod, view)
            ]
        except (AttributeError, KeyError, TypeError, ValueError):
            # a policy of a shape this module cannot read isolates its namespace, allowing nothing
            if namespace_of(policy) != namespace_of(pod):
                continue
            found = []
        isolated = True
        allowances.extend(found)
    return DirectionRules(isolated=isolated, allowances=tuple(allowances))


def port_in(ranges: tuple[PortRange, ...] | None, protocol: Protocol, port: int) -> bool:
    if ranges is None:
        return True
    return any(r.protocol is protocol and r.first <= port <= r.last for r in ranges)


def judge_forward(egress: DirectionRules, forward: Forward) -> ForwardVerdict:
    """Open when egress allows TCP to the forward's target address and port."""
    if not egress.isolated:
        return ForwardVerdict(forward.pod_port, True)
    allowed = any(
        port_in(a.ports, Protocol.TCP, forward.host_port)
        and (a.any_peer or any(b.holds(forward.host_address) for b in a.blocks))
        for a in egress.allowances
    )
    return ForwardVerdict(forward.pod_port, allowed)


def compute_pod_rules(
    pod: Mapping[str, Any], view: ClusterView, forwards: Sequence[Forward] = ()
) -> PodRules:
    """What the policies in `view` allow `pod` (its own namespace, labels and ports)."""
    ingress = compute_direction(pod, view, Direction.INGRESS)
    egress = compute_direction(pod, view, Direction.EGRESS)
    verdicts = tuple(judge_forward(egress, f) for f in forwards)
    return PodRules(ingress, egress, verdicts)
