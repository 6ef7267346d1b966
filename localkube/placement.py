"""Where a pod may go and where it should: kube-scheduler's filters and scores, pure.

`choose_node` decides over plain dicts (the pod, the nodes, the pods by node) so it is tested
without a server; `localkube.scheduler.Scheduler` is the loop that feeds it from the store.

Filters: resource fit (cpu, memory, nvidia.com/gpu, ephemeral-storage, pod count) against
allocatable minus non-terminated pods on the node; nodeSelector; required node affinity
(terms ORed, their matchExpressions and metadata.name matchFields ANDed, an empty term
matching no node); NoSchedule taints vs tolerations; required pod affinity/anti-affinity
on any topology key.
Score: preferred pod affinity packs, preferred anti-affinity spreads, preferred node affinity
attracts; least-allocated breaks ties. Messages use the real scheduler's wording
(`0/2 nodes are available: 2 Insufficient nvidia.com/gpu.`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from fractions import Fraction

from localkube.apiserver.admission import TERMINAL_PHASES, pod_usage
from localkube.apiserver.nodelifecycle import UNREACHABLE_TAINT_KEY
from localkube.apiserver.quantity import parse_quantity
from localkube.apiserver.selectors import label_selector_from_object

GPU = "nvidia.com/gpu"
FIT_RESOURCES = ("cpu", "memory", GPU, "ephemeral-storage")


@dataclass(frozen=True)
class Decision:
    node: str | None
    message: str  # the FailedScheduling message when node is None


def is_active(pod: dict) -> bool:
    return (pod.get("status") or {}).get("phase") not in TERMINAL_PHASES


def node_label(node: dict, key: str) -> str | None:
    return (node["metadata"].get("labels") or {}).get(key)


# A pod's requests by (uid, resourceVersion): every scheduling decision sums the requests of
# every pod on every node, and parsing their quantities again each time made a gang's
# placement quadratic in its size (bench/bench_scale.py: 85% of the API server's time at 384
# pods). A stored pod's resourceVersion changes with any change, so an entry never goes stale.
_REQUESTS_CACHE: dict[tuple[str, str], dict[str, Fraction]] = {}
REQUESTS_CACHE_LIMIT = 100_000


def pod_requests(pod: dict) -> dict[str, Fraction]:
    meta = pod.get("metadata") or {}
    key = (meta.get("uid"), meta.get("resourceVersion"))
    cached = _REQUESTS_CACHE.get(key) if all(key) else None
    if cached is not None:
        return cached
    usage = pod_usage(pod)
    requests = {r: usage.get(f"requests.{r}", Fraction(0)) for r in FIT_RESOURCES}
    if all(key):
        if len(_REQUESTS_CACHE) >= REQUESTS_CACHE_LIMIT:
            _REQUESTS_CACHE.clear()
        _REQUESTS_CACHE[key] = requests
    return requests


def _node_expression_matches(node: dict, expr: dict) -> bool:
    value = node_label(node, expr.get("key", ""))
    operator, values = expr.get("operator"), expr.get("values") or []
    if operator == "In":
        return value in values
    if operator == "NotIn":
        return value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt") and value is not None and values:
        try:
            return int(value) > int(values[0]) if operator == "Gt" else int(value) < int(values[0])
        except ValueError:
            return False
    return False


def _field_matches_node(node: dict, field: dict) -> bool:
    """A matchFields requirement: kube-scheduler knows only `metadata.name`, In or NotIn."""
    if field.get("key") != "metadata.name" or field.get("operator") not in ("In", "NotIn"):
        return False
    inside = node["metadata"]["name"] in (field.get("values") or [])
    return inside if field["operator"] == "In" else not inside


def _term_matches_node(node: dict, term: dict) -> bool:
    """Every requirement of the term holds; an empty term matches no node (as Kubernetes')."""
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False
    return all(_node_expression_matches(node, e) for e in expressions) and all(
        _field_matches_node(node, f) for f in fields
    )


def matches_node_selector(pod: dict, node: dict) -> bool:
    spec = pod.get("spec") or {}
    labels = node["metadata"].get("labels") or {}
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms")
    if terms:
        return any(_term_matches_node(node, t) for t in terms)
    return True


def _tolerates(toleration: dict, taint: dict) -> bool:
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    if toleration.get("operator") == "Exists":
        return not toleration.get("key") or toleration["key"] == taint.get("key")
    return toleration.get("key") == taint.get("key") and toleration.get("value", "") == taint.get(
        "value", ""
    )


def untolerated_taint(pod: dict, node: dict) -> dict | None:
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(_tolerates(t, taint) for t in tolerations):
            return taint
    return None


def _term_selector(term: dict, owner: dict):
    """Which pods an affinity term of `owner` selects (namespaces default to owner's), parsed
    once: a score walks every placed pod with it (issue 18)."""
    namespaces = term.get("namespaces") or [owner["metadata"].get("namespace")]
    any_namespace = term.get("namespaceSelector") is not None
    selector = label_selector_from_object(term.get("labelSelector"))

    def selects(other: dict) -> bool:
        meta = other["metadata"]
        if not any_namespace and meta.get("namespace") not in namespaces:
            return False
        return selector(meta.get("labels") or {})

    return selects


def _term_selects(term: dict, owner: dict, other: dict) -> bool:
    """Does an affinity term of `owner` select pod `other`?"""
    return _term_selector(term, owner)(other)


def _same_domain(nodes: dict[str, dict], a: str, b: str, key: str) -> bool:
    value = node_label(nodes[a], key) if a in nodes else None
    return value is not None and nodes.get(b) is not None and node_label(nodes[b], key) == value


def _affinity_terms(pod: dict, kind: str, mode: str) -> list[dict]:
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get(kind) or {}
    return affinity.get(f"{mode}DuringSchedulingIgnoredDuringExecution") or []


@dataclass(frozen=True)
class Placement:
    """What one decision reads of the pods already placed, gathered once per decision: the
    filters and scores of every node read it, and gathering it per node made placing a gang
    quadratic in the number of pods times the number of nodes."""

    active: dict[str, list[dict]]  # not terminated pods, by node
    used: dict[str, Counter]  # their summed requests, by node
    anti_affinity: list[tuple[str, dict, list[dict]]]  # (node, pod, its required anti terms)


# Each node's summed requests and anti-affinity holders, by the (uid, resourceVersion) of its
# active pods: a decision changes one node, and summing every node's pods again for each pod
# placed made a 1,024-pod gang's placement quadratic (bench/bench_scale.py, issue 18).
_NODE_SUMMARY: dict[str, tuple[tuple, Counter, list]] = {}


def summarise_placement(pods_by_node: dict[str, list[dict]]) -> Placement:
    active = {name: [p for p in pods if is_active(p)] for name, pods in pods_by_node.items()}
    used = {}
    anti = []
    for name, pods in active.items():
        key = tuple((p["metadata"].get("uid"), p["metadata"].get("resourceVersion")) for p in pods)
        cached = _NODE_SUMMARY.get(name)
        if cached is not None and cached[0] == key:
            used[name] = cached[1]
            anti.extend(cached[2])
            continue
        used[name], held = Counter(), []
        for other in pods:
            used[name].update(pod_requests(other))
            terms = _affinity_terms(other, "podAntiAffinity", "required")
            if terms:
                held.append((name, other, terms))
        anti.extend(held)
        if all(uid and version for uid, version in key):
            _NODE_SUMMARY[name] = (key, used[name], held)
    return Placement(active, used, anti)


def _pods_in_domain(
    node_name: str, key: str, nodes: dict[str, dict], pods_by_node: dict[str, list[dict]]
) -> list[dict]:
    return [
        p
        for other, pods in pods_by_node.items()
        if _same_domain(nodes, node_name, other, key)
        for p in pods
    ]


def filter_node(pod: dict, node: dict, nodes: dict[str, dict], placed: Placement) -> list[str]:
    """The reasons `node` cannot take `pod`, worded as kube-scheduler words them (empty: fits)."""
    name = node["metadata"]["name"]
    reasons = []
    if (node.get("spec") or {}).get("unschedulable"):
        reasons.append("node(s) were unschedulable")
    if not matches_node_selector(pod, node):
        reasons.append("node(s) didn't match Pod's node affinity/selector")
    taint = untolerated_taint(pod, node)
    if taint is not None:
        shown = f"{taint.get('key')}: {taint['value']}" if taint.get("value") else taint.get("key")
        reasons.append(f"node(s) had untolerated taint {{{shown}}}")
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    on_node = placed.active.get(name, [])
    if len(on_node) + 1 > int(parse_quantity(allocatable.get("pods", "110"))):
        reasons.append("Too many pods")
    wanted = pod_requests(pod)
    used = placed.used.get(name) or Counter()
    for resource in FIT_RESOURCES:
        if wanted[resource] <= 0:
            continue
        capacity = parse_quantity(allocatable.get(resource, "0"))
        if used[resource] + wanted[resource] > capacity:
            reasons.append(f"Insufficient {resource}")
    reasons.extend(_pod_affinity_reasons(pod, name, nodes, placed))
    return reasons


def _pod_affinity_reasons(
    pod: dict, node_name: str, nodes: dict[str, dict], placed: Placement
) -> list[str]:
    reasons = []
    required = _affinity_terms(pod, "podAffinity", "required")
    all_pods = [p for pods in placed.active.values() for p in pods] if required else []
    for term in required:
        key = term.get("topologyKey", "kubernetes.io/hostname")
        in_domain = _pods_in_domain(node_name, key, nodes, placed.active)
        if any(_term_selects(term, pod, p) for p in in_domain):
            continue
        # The first pod of a group that selects itself may go anywhere (as in kube-scheduler).
        if (
            not any(_term_selects(term, pod, p) for p in all_pods)
            and _term_selects(term, pod, pod)
            and node_label(nodes[node_name], key) is not None
        ):
            continue
        reasons.append("node(s) didn't match pod affinity rules")
        break
    for term in _affinity_terms(pod, "podAntiAffinity", "required"):
        key = term.get("topologyKey", "kubernetes.io/hostname")
        in_domain = _pods_in_domain(node_name, key, nodes, placed.active)
        if any(_term_selects(term, pod, p) for p in in_domain):
            reasons.append("node(s) didn't match pod anti-affinity rules")
            break
    else:
        # Symmetry: existing pods' required anti-affinity also keeps this pod away.
        for other_node, other, terms in placed.anti_affinity:
            for term in terms:
                key = term.get("topologyKey", "kubernetes.io/hostname")
                if _same_domain(nodes, node_name, other_node, key) and _term_selects(
                    term, other, pod
                ):
                    reasons.append("node(s) didn't match pod anti-affinity rules")
                    return reasons
    return reasons


def score_node(pod: dict, node: dict, nodes: dict[str, dict], placed: Placement) -> float:
    name = node["metadata"]["name"]
    preference = 0.0
    for term in _affinity_terms(pod, "nodeAffinity", "preferred"):
        if _term_matches_node(node, term.get("preference") or {}):
            preference += term.get("weight", 1)
    for kind, sign in (("podAffinity", 1), ("podAntiAffinity", -1)):
        for weighted in _affinity_terms(pod, kind, "preferred"):
            term = weighted.get("podAffinityTerm") or {}
            key = term.get("topologyKey", "kubernetes.io/hostname")
            selects = _term_selector(term, pod)
            matches = sum(1 for p in _pods_in_domain(name, key, nodes, placed.active) if selects(p))
            preference += sign * weighted.get("weight", 1) * matches
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    used = placed.used.get(name) or Counter()
    wanted = pod_requests(pod)
    free = []
    for resource in ("cpu", "memory"):
        capacity = parse_quantity(allocatable.get(resource, "0"))
        if capacity > 0:
            free.append(float((capacity - used[resource] - wanted[resource]) / capacity))
    least_allocated = sum(free) / len(free) if free else 0.0
    return preference * 1000 + least_allocated


NOT_READY_REASON = "node(s) had untolerated taint {node.kubernetes.io/not-ready: }"
# A node the node lifecycle controller found silent (apiserver/nodelifecycle.py) carries it.
UNREACHABLE_REASON = "node(s) had untolerated taint {node.kubernetes.io/unreachable: }"


def not_ready_reason(node: dict) -> str:
    """How kube-scheduler words a node that is not Ready: by the taint it has."""
    taints = (node.get("spec") or {}).get("taints") or []
    if any(t.get("key") == UNREACHABLE_TAINT_KEY for t in taints):
        return UNREACHABLE_REASON
    return NOT_READY_REASON


def choose_node(
    pod: dict, nodes: list[dict], pods_by_node: dict[str, list[dict]], not_ready: int | Counter = 0
) -> Decision:
    """The best node for `pod`, or why none fits; `not_ready` counts nodes left out because
    their kubelet is not Ready (reported like the not-ready taint kube-scheduler sees), or
    is a Counter of such reasons (not_ready_reason)."""
    by_name = {n["metadata"]["name"]: n for n in nodes}
    placed = summarise_placement(pods_by_node)
    feasible, reasons = [], Counter()
    left_out = (
        not_ready
        if isinstance(not_ready, Counter)
        else Counter({NOT_READY_REASON: not_ready} if not_ready else {})
    )
    reasons.update(left_out)
    for node in nodes:
        node_reasons = filter_node(pod, node, by_name, placed)
        if node_reasons:
            reasons.update(set(node_reasons))
        else:
            feasible.append(node)
    if not feasible:
        return Decision(None, unschedulable_message(len(nodes) + sum(left_out.values()), reasons))
    best = max(feasible, key=lambda n: (score_node(pod, n, by_name, placed), -nodes.index(n)))
    return Decision(best["metadata"]["name"], "")


def unschedulable_message(node_count: int, reasons: Counter) -> str:
    if node_count == 0:
        return "no nodes available to schedule pods"
    parts = ", ".join(f"{count} {reason}" for reason, count in sorted(reasons.items()))
    return f"0/{node_count} nodes are available: {parts}."
