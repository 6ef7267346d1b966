"""A container's effective security context, turned into the profile its processes run with.

Why: the kubelet, not the runtime, decides who a container runs as. This module does what the
kubelet and containerd do together, as pure functions of the pod: the pod-level fields
(runAsUser, runAsGroup, runAsNonRoot, seccompProfile, ...) are overridden by the container's;
runAsNonRoot is verified with the kubelet's own messages (a refusal becomes the container's
`CreateContainerConfigError`); the supplementary groups are the user's groups from the image
(localkube's images are the host, so the host's /etc/group), fsGroup and supplementalGroups;
the capability bounding set is containerd's default set, minus `drop`, plus `add` (all of them
for a privileged container); `allowPrivilegeEscalation: false` means no_new_privs;
`seccompProfile` RuntimeDefault selects localkube's filter (seccomp.py).

The profile (a JSON- and marshal-friendly dict) goes into the shim's spec and into the pod's
state.json, where exec sessions read it; privileges.apply_privileges applies it.
"""

from __future__ import annotations

import os
import pwd
from enum import StrEnum

from localkube.kubelet.errors import KubeletError

# Overridable at container level (the rest of the pod's securityContext is pod-only).
POD_LEVEL_FIELDS = (
    "runAsUser",
    "runAsGroup",
    "runAsNonRoot",
    "seccompProfile",
    "seLinuxOptions",
    "appArmorProfile",
    "windowsOptions",
)
CAPABILITY_NAMES = (
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
)
# containerd's default set for a container that asks for nothing else.
DEFAULT_CAPABILITIES = (
    "CHOWN",
    "DAC_OVERRIDE",
    "FSETID",
    "FOWNER",
    "MKNOD",
    "NET_RAW",
    "SETGID",
    "SETUID",
    "SETFCAP",
    "SETPCAP",
    "NET_BIND_SERVICE",
    "SYS_CHROOT",
    "KILL",
    "AUDIT_WRITE",
)


class SeccompType(StrEnum):
    UNCONFINED = "Unconfined"
    RUNTIME_DEFAULT = "RuntimeDefault"
    LOCALHOST = "Localhost"


class ContainerConfigError(KubeletError):
    """The container cannot be created as specified (the kubelet's CreateContainerConfigError)."""


def merge_security_context(pod: dict, container: dict) -> dict:
    """The container's effective securityContext: pod-level fields, overridden by its own."""
    pod_sc = (pod.get("spec") or {}).get("securityContext") or {}
    effective = {k: pod_sc[k] for k in POD_LEVEL_FIELDS if pod_sc.get(k) is not None}
    effective.update(
        {k: v for k, v in (container.get("securityContext") or {}).items() if v is not None}
    )
    return effective


def describe_pod(pod: dict) -> str:
    """The kubelet's format.Pod: `name_namespace(uid)`."""
    meta = pod.get("metadata") or {}
    return f"{meta.get('name')}_{meta.get('namespace')}({meta.get('uid')})"


def verify_run_as_non_root(pod: dict, container: dict, effective: dict) -> None:
    """The kubelet's verifyRunAsNonRoot; localkube's images (the host) run as root."""
    if not effective.get("runAsNonRoot"):
        return
    where = f'(pod: "{describe_pod(pod)}", container: {container["name"]})'
    if effective.get("runAsUser") is not None:
        if int(effective["runAsUser"]) == 0:
            raise ContainerConfigError(f"container's runAsUser breaks non-root policy {where}")
        return
    raise ContainerConfigError(f"container has runAsNonRoot and image will run as root {where}")


def parse_capability(name: str, field: str) -> int | None:
    """The capability number of `NET_RAW` or `CAP_NET_RAW` (None for ALL)."""
    bare = str(name).upper().removeprefix("CAP_")
    if bare == "ALL":
        return None
    if bare not in CAPABILITY_NAMES:
        raise ContainerConfigError(
            f"securityContext.capabilities.{field}: unknown capability {name!r}; "
            f"known: ALL, {', '.join(CAPABILITY_NAMES)}"
        )
    return CAPABILITY_NAMES.index(bare)


def resolve_capabilities(effective: dict) -> list[int]:
    """The bounding set to keep: containerd's default set, `add` ALL, `drop` ALL, then the rest."""
    if effective.get("privileged"):
        return list(range(len(CAPABILITY_NAMES)))
    spec = effective.get("capabilities") or {}
    add = [str(c) for c in spec.get("add") or []]
    drop = [str(c) for c in spec.get("drop") or []]
    kept = {CAPABILITY_NAMES.index(c) for c in DEFAULT_CAPABILITIES}
    if any(parse_capability(c, "add") is None for c in add):
        kept = set(range(len(CAPABILITY_NAMES)))
    if any(parse_capability(c, "drop") is None for c in drop):
        kept = set()
    kept |= {n for c in add if (n := parse_capability(c, "add")) is not None}
    kept -= {n for c in drop if (n := parse_capability(c, "drop")) is not None}
    return sorted(kept)


def resolve_groups(pod: dict, uid: int, gid: int) -> list[int]:
    """The primary gid, the user's groups in the image's /etc/group, fsGroup, supplementalGroups."""
    groups = [gid]
    try:
        name = pwd.getpwuid(uid).pw_name
        groups += os.getgrouplist(name, gid)
    except KeyError:
        pass  # a uid the image does not know: no groups of its own, as with containerd
    pod_sc = (pod.get("spec") or {}).get("securityContext") or {}
    if pod_sc.get("fsGroup") is not None:
        groups.append(int(pod_sc["fsGroup"]))
    groups += [int(g) for g in pod_sc.get("supplementalGroups") or []]
    return list(dict.fromkeys(groups))


def resolve_primary_gid(uid: int, effective: dict) -> int:
    if effective.get("runAsGroup") is not None:
        return int(effective["runAsGroup"])
    try:
        return pwd.getpwuid(uid).pw_gid
    except KeyError:
        return 0


def resolve_seccomp(effective: dict) -> str | None:
    """ "RuntimeDefault" when the container is to be filtered; None when unconfined."""
    if effective.get("privileged"):
        return None
    profile = effective.get("seccompProfile") or {}
    kind = profile.get("type") or SeccompType.UNCONFINED.value
    try:
        seccomp = SeccompType(kind)
    except ValueError:
        allowed = ", ".join(t.value for t in SeccompType)
        raise ContainerConfigError(
            f"securityContext.seccompProfile.type: {kind!r} is not a seccomp profile type; "
            f"allowed: {allowed}"
        ) from None
    if seccomp is SeccompType.LOCALHOST:
        raise ContainerConfigError(
            f"securityContext.seccompProfile: Localhost profile "
            f"{profile.get('localhostProfile')!r} cannot be loaded: localkube has no node "
            "profile directory; use RuntimeDefault"
        )
    return SeccompType.RUNTIME_DEFAULT.value if seccomp is SeccompType.RUNTIME_DEFAULT else None


def build_security_profile(pod: dict, container: dict) -> dict:
    """What the container's processes run as; raises ContainerConfigError when it cannot run."""
    effective = merge_security_context(pod, container)
    verify_run_as_non_root(pod, container, effective)
    uid = int(effective.get("runAsUser") or 0)
    gid = resolve_primary_gid(uid, effective)
    return {
        "uid": uid,
        "gid": gid,
        "groups": resolve_groups(pod, uid, gid),
        "capabilities": resolve_capabilities(effective),
        "noNewPrivs": effective.get("allowPrivilegeEscalation") is False,
        "seccomp": resolve_seccomp(effective),
    }
