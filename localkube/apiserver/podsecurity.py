"""Pod Security Admission: the Kubernetes Pod Security Standards, enforced per namespace.

Why: tenant namespaces carry `pod-security.kubernetes.io/enforce: restricted`, and a pod that
a real cluster refuses must be refused here too, with the same words, so that production code
meets the refusal in tests first. Only `enforce` is honoured (not `audit`/`warn`), on pod
create, for the levels `privileged` (anything goes), `baseline` and `restricted`; the
`enforce-version` label only names the policy in the message (the checks are those of the
latest version). An unknown level is enforced as `restricted`, as the real plugin does.

Each check mirrors one of k8s.io/pod-security-admission/policy (check ID, forbidden reason,
detail text); they run in the real order (baseline checks sorted by ID, then restricted
checks sorted by ID, restricted ones replacing the baseline checks they override; the checks
themselves are podsecurity_checks.py's), over containers, initContainers and
ephemeralContainers, and the refusal reads
`pods "x" is forbidden: violates PodSecurity "restricted:latest": reason (detail), ...`.
"""

from __future__ import annotations

from enum import StrEnum

from localkube.apiserver.podsecurity_checks import (
    BASELINE_CHECKS,
    OVERRIDDEN_BY_RESTRICTED,
    RESTRICTED_CHECKS,
    Violation,
)

ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
ENFORCE_VERSION_LABEL = "pod-security.kubernetes.io/enforce-version"


class Level(StrEnum):
    PRIVILEGED = "privileged"
    BASELINE = "baseline"
    RESTRICTED = "restricted"


def read_enforced_policy(namespace: dict | None) -> tuple[Level, str]:
    """The namespace's enforced level and version label ("latest" when unset)."""
    labels = ((namespace or {}).get("metadata") or {}).get("labels") or {}
    raw = labels.get(ENFORCE_LABEL)
    version = labels.get(ENFORCE_VERSION_LABEL) or "latest"
    if raw is None:
        return Level.PRIVILEGED, version
    try:
        return Level(raw), version
    except ValueError:
        return Level.RESTRICTED, version  # an invalid level enforces the strictest one


def evaluate_pod(level: Level, pod: dict) -> list[Violation]:
    """The violations of `pod` against `level`, in the order the real plugin reports them."""
    if level is Level.PRIVILEGED:
        return []
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    checks = list(BASELINE_CHECKS)
    if level is Level.RESTRICTED:
        checks = [c for c in checks if c[0] not in OVERRIDDEN_BY_RESTRICTED]
        checks += list(RESTRICTED_CHECKS)
    return [v for _, check in checks if (v := check(meta, spec)) is not None]


def describe_violations(level: Level, version: str, violations: list[Violation]) -> str:
    """`violates PodSecurity "restricted:latest": reason (detail), reason (detail)`."""
    parts = [f"{reason} ({detail})" if detail else reason for reason, detail in violations]
    return f'violates PodSecurity "{level.value}:{version}": {", ".join(parts)}'
