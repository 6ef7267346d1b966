"""The checks of the Pod Security Standards, one function per check of the real plugin.

Each mirrors one of k8s.io/pod-security-admission/policy: its check ID, forbidden reason
and detail text, over containers, initContainers and ephemeralContainers. `BASELINE_CHECKS`
and `RESTRICTED_CHECKS` list them by ID in the real order; podsecurity.py decides which
run for a namespace's level and words the refusal.
"""

from __future__ import annotations

from collections.abc import Callable

BASELINE_CAPABILITIES = {
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
}
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
}
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t"}
RESTRICTED_VOLUME_SOURCES = (
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
)
APPARMOR_ANNOTATION_PREFIX = "container.apparmor.security.beta.kubernetes.io/"

Violation = tuple[str, str]  # (forbidden reason, detail)
Check = Callable[[dict, dict], "Violation | None"]


def join_quote(items: list[str]) -> str:
    return '"' + '", "'.join(items) + '"' if items else ""


def pluralize(singular: str, plural: str, count: int) -> str:
    return singular if count == 1 else plural


def name_containers(names: list[str]) -> str:
    return f"{pluralize('container', 'containers', len(names))} {join_quote(names)}"


def list_containers(spec: dict) -> list[dict]:
    return [
        c
        for key in ("initContainers", "containers", "ephemeralContainers")
        for c in spec.get(key) or []
    ]


def read_container_sc(container: dict) -> dict:
    return container.get("securityContext") or {}


def read_pod_sc(spec: dict) -> dict:
    return spec.get("securityContext") or {}


# ---- baseline ------------------------------------------------------------------------------
def check_app_armor_profile(meta: dict, spec: dict) -> Violation | None:
    setters, values = [], set()
    profile = read_pod_sc(spec).get("appArmorProfile")
    if profile and profile.get("type") not in ("RuntimeDefault", "Localhost"):
        setters.append("pod")
        values.add(str(profile.get("type")))
    bad = []
    for c in list_containers(spec):
        profile = read_container_sc(c).get("appArmorProfile")
        if profile and profile.get("type") not in ("RuntimeDefault", "Localhost"):
            bad.append(c["name"])
            values.add(str(profile.get("type")))
    if bad:
        setters.append(name_containers(bad))
    listed = sorted(values)
    annotations = sorted(
        f'{k}="{v}"'
        for k, v in (meta.get("annotations") or {}).items()
        if k.startswith(APPARMOR_ANNOTATION_PREFIX)
        and v
        and v != "runtime/default"
        and not v.startswith("localhost/")
    )
    if annotations:
        listed += annotations
        setters.append(pluralize("annotation", "annotations", len(annotations)))
    if not setters:
        return None
    reason = pluralize("forbidden AppArmor profile", "forbidden AppArmor profiles", len(listed))
    return reason, (
        f"{' and '.join(setters)} must not set AppArmor profile type to {join_quote(listed)}"
    )


def check_capabilities_baseline(meta: dict, spec: dict) -> Violation | None:
    bad, caps = [], set()
    for c in list_containers(spec):
        added = [str(a) for a in (read_container_sc(c).get("capabilities") or {}).get("add") or []]
        forbidden = [a for a in added if a not in BASELINE_CAPABILITIES]
        if forbidden:
            bad.append(c["name"])
            caps.update(forbidden)
    if not bad:
        return None
    return "non-default capabilities", (
        f"{name_containers(bad)} must not include "
        f"{join_quote(sorted(caps))} in "
        "securityContext.capabilities.add"
    )


def check_host_namespaces(meta: dict, spec: dict) -> Violation | None:
    used = sorted(k for k in ("hostNetwork", "hostPID", "hostIPC") if spec.get(k))
    return ("host namespaces", ", ".join(used)) if used else None


def check_host_path_volumes(meta: dict, spec: dict) -> Violation | None:
    names = [v["name"] for v in spec.get("volumes") or [] if v.get("hostPath") is not None]
    if not names:
        return None
    return "hostPath volumes", f"{pluralize('volume', 'volumes', len(names))} {join_quote(names)}"


def check_host_ports(meta: dict, spec: dict) -> Violation | None:
    bad, ports = [], set()
    for c in list_containers(spec):
        used = [str(p["hostPort"]) for p in c.get("ports") or [] if p.get("hostPort")]
        if used:
            bad.append(c["name"])
            ports.update(used)
    if not bad:
        return None
    return "hostPort", (
        f"{name_containers(bad)} {pluralize('uses', 'use', len(bad))} "
        f"{pluralize('hostPort', 'hostPorts', len(ports))} "
        f"{', '.join(sorted(ports))}"
    )


def check_host_probes_and_lifecycle(meta: dict, spec: dict) -> Violation | None:
    bad, hosts = [], set()
    for c in list_containers(spec):
        handlers = [c.get(p) for p in ("livenessProbe", "readinessProbe", "startupProbe")]
        handlers += [(c.get("lifecycle") or {}).get(h) for h in ("postStart", "preStop")]
        found = [
            h[kind]["host"]
            for h in handlers
            if h
            for kind in ("httpGet", "tcpSocket")
            if (h.get(kind) or {}).get("host")
        ]
        if found:
            bad.append(c["name"])
            hosts.update(found)
    if not bad:
        return None
    bad = sorted(set(bad))
    return "probe or lifecycle host", (
        f"{name_containers(bad)} {pluralize('uses', 'use', len(bad))} "
        f"{pluralize('probe or lifecycle host', 'probe or lifecycle hosts', len(hosts))} "
        f"{join_quote(sorted(hosts))}"
    )


def check_privileged(meta: dict, spec: dict) -> Violation | None:
    bad = [c["name"] for c in list_containers(spec) if read_container_sc(c).get("privileged")]
    if not bad:
        return None
    return "privileged", f"{name_containers(bad)} must not set securityContext.privileged=true"


def check_proc_mount(meta: dict, spec: dict) -> Violation | None:
    bad, kinds = [], set()
    for c in list_containers(spec):
        mount = read_container_sc(c).get("procMount")
        if mount is not None and mount != "Default":
            bad.append(c["name"])
            kinds.add(str(mount))
    if not bad:
        return None
    return "procMount", (
        f"{name_containers(bad)} must not set securityContext.procMount to "
        f"{join_quote(sorted(kinds))}"
    )


def check_selinux_options(meta: dict, spec: dict) -> Violation | None:
    setters, types, flags = [], set(), set()

    def is_valid(options: dict) -> bool:
        valid = True
        if (options.get("type") or "") not in SELINUX_TYPES:
            types.add(options["type"])
            valid = False
        for key in ("user", "role"):
            if options.get(key):
                flags.add(key)
                valid = False
        return valid

    options = read_pod_sc(spec).get("seLinuxOptions")
    if options is not None and not is_valid(options):
        setters.append("pod")
    bad = [
        c["name"]
        for c in list_containers(spec)
        if read_container_sc(c).get("seLinuxOptions") is not None
        and not is_valid(read_container_sc(c)["seLinuxOptions"])
    ]
    if bad:
        setters.append(name_containers(bad))
    if not setters:
        return None
    data = []
    if types:
        data.append(f"{pluralize('type', 'types', len(types))} {join_quote(sorted(types))}")
    data += [f"{key} may not be set" for key in ("user", "role") if key in flags]
    return "seLinuxOptions", (
        f"{' and '.join(setters)} set forbidden securityContext.seLinuxOptions: {'; '.join(data)}"
    )


def read_seccomp_type(sc: dict) -> str | None:
    profile = sc.get("seccompProfile")
    return None if profile is None else str(profile.get("type") or "")


def check_seccomp(spec: dict, required: bool) -> Violation | None:
    """seccompProfile_baseline (required=False) and seccompProfile_restricted (True)."""
    setters, values, implicit = [], set(), []
    pod_type = read_seccomp_type(read_pod_sc(spec))
    if pod_type is not None and pod_type not in ("RuntimeDefault", "Localhost"):
        setters.append("pod")
        values.add(pod_type)
    pod_ok = pod_type in ("RuntimeDefault", "Localhost")
    bad = []
    for c in list_containers(spec):
        kind = read_seccomp_type(read_container_sc(c))
        if kind is not None:
            if kind not in ("RuntimeDefault", "Localhost"):
                bad.append(c["name"])
                values.add(kind)
        elif not pod_ok:
            implicit.append(c["name"])
    if bad:
        setters.append(name_containers(bad))
    if setters:
        return "seccompProfile", (
            f"{' and '.join(setters)} must not set "
            f"securityContext.seccompProfile.type to "
            f"{join_quote(sorted(values))}"
        )
    if required and implicit:
        return "seccompProfile", (
            f"pod or {name_containers(implicit)} must set "
            'securityContext.seccompProfile.type to "RuntimeDefault" '
            'or "Localhost"'
        )
    return None


def check_sysctls(meta: dict, spec: dict) -> Violation | None:
    names = [
        s.get("name", "")
        for s in read_pod_sc(spec).get("sysctls") or []
        if s.get("name") not in SAFE_SYSCTLS
    ]
    return ("forbidden sysctls", ", ".join(names)) if names else None


def check_windows_host_process(meta: dict, spec: dict) -> Violation | None:
    setters = []
    if (read_pod_sc(spec).get("windowsOptions") or {}).get("hostProcess"):
        setters.append("pod")
    bad = [
        c["name"]
        for c in list_containers(spec)
        if (read_container_sc(c).get("windowsOptions") or {}).get("hostProcess")
    ]
    if bad:
        setters.append(name_containers(bad))
    if not setters:
        return None
    return "hostProcess", (
        f"{' and '.join(setters)} must not set securityContext.windowsOptions.hostProcess=true"
    )


# ---- restricted ----------------------------------------------------------------------------
def check_allow_privilege_escalation(meta: dict, spec: dict) -> Violation | None:
    bad = [
        c["name"]
        for c in list_containers(spec)
        if read_container_sc(c).get("allowPrivilegeEscalation") is not False
    ]
    if not bad:
        return None
    return "allowPrivilegeEscalation != false", (
        f"{name_containers(bad)} must set securityContext.allowPrivilegeEscalation=false"
    )


def check_capabilities_restricted(meta: dict, spec: dict) -> Violation | None:
    missing_drop, adding, caps = [], [], set()
    for c in list_containers(spec):
        capabilities = read_container_sc(c).get("capabilities")
        if capabilities is None:
            missing_drop.append(c["name"])
            continue
        if "ALL" not in [str(d) for d in capabilities.get("drop") or []]:
            missing_drop.append(c["name"])
        forbidden = [str(a) for a in capabilities.get("add") or [] if a != "NET_BIND_SERVICE"]
        if forbidden:
            adding.append(c["name"])
            caps.update(forbidden)
    details = []
    if missing_drop:
        details.append(
            f'{name_containers(missing_drop)} must set securityContext.capabilities.drop=["ALL"]'
        )
    if adding:
        details.append(
            f"{name_containers(adding)} must not include "
            f"{join_quote(sorted(caps))} in securityContext.capabilities.add"
        )
    return ("unrestricted capabilities", "; ".join(details)) if details else None


def check_restricted_volumes(meta: dict, spec: dict) -> Violation | None:
    bad, kinds = [], set()
    for volume in spec.get("volumes") or []:
        sources = [k for k in volume if k != "name" and volume[k] is not None]
        if any(k in RESTRICTED_VOLUME_SOURCES for k in sources):
            continue
        bad.append(volume["name"])
        kinds.update(sources or ["unknown"])
    if not bad:
        return None
    return "restricted volume types", (
        f"{pluralize('volume', 'volumes', len(bad))} {join_quote(bad)} "
        f"{pluralize('uses', 'use', len(bad))} "
        f"{pluralize('restricted volume type', 'restricted volume types', len(kinds))} "
        f"{join_quote(sorted(kinds))}"
    )


def check_run_as_non_root(meta: dict, spec: dict) -> Violation | None:
    setters, implicit, explicit = [], [], []
    pod_value = read_pod_sc(spec).get("runAsNonRoot")
    if pod_value is False:
        setters.append("pod")
    for c in list_containers(spec):
        value = read_container_sc(c).get("runAsNonRoot")
        if value is not None:
            if not value:
                explicit.append(c["name"])
        elif pod_value is not True:
            implicit.append(c["name"])
    if explicit:
        setters.append(name_containers(explicit))
    if setters:
        return "runAsNonRoot != true", (
            f"{' and '.join(setters)} must not set securityContext.runAsNonRoot=false"
        )
    if implicit:
        return "runAsNonRoot != true", (
            f"pod or {name_containers(implicit)} must set securityContext.runAsNonRoot=true"
        )
    return None


def check_run_as_user(meta: dict, spec: dict) -> Violation | None:
    setters = ["pod"] if read_pod_sc(spec).get("runAsUser") == 0 else []
    bad = [c["name"] for c in list_containers(spec) if read_container_sc(c).get("runAsUser") == 0]
    if bad:
        setters.append(name_containers(bad))
    if not setters:
        return None
    return "runAsUser=0", f"{' and '.join(setters)} must not set runAsUser=0"


# (check ID, check); sorted by ID within each level, as the real registry orders them.
BASELINE_CHECKS: tuple[tuple[str, Check], ...] = (
    ("appArmorProfile", check_app_armor_profile),
    ("capabilities_baseline", check_capabilities_baseline),
    ("hostNamespaces", check_host_namespaces),
    ("hostPathVolumes", check_host_path_volumes),
    ("hostPorts", check_host_ports),
    ("hostProbesAndHostLifecycle", check_host_probes_and_lifecycle),
    ("privileged", check_privileged),
    ("procMount_baseline", check_proc_mount),
    ("seLinuxOptions", check_selinux_options),
    ("seccompProfile_baseline", lambda meta, spec: check_seccomp(spec, required=False)),
    ("sysctls", check_sysctls),
    ("windowsHostProcess", check_windows_host_process),
)
RESTRICTED_CHECKS: tuple[tuple[str, Check], ...] = (
    ("allowPrivilegeEscalation", check_allow_privilege_escalation),
    ("capabilities_restricted", check_capabilities_restricted),
    ("procMount_restricted", check_proc_mount),
    ("restrictedVolumes", check_restricted_volumes),
    ("runAsNonRoot", check_run_as_non_root),
    ("runAsUser", check_run_as_user),
    ("seccompProfile_restricted", lambda meta, spec: check_seccomp(spec, required=True)),
)
OVERRIDDEN_BY_RESTRICTED = {
    "capabilities_baseline",
    "hostPathVolumes",
    "procMount_baseline",
    "seccompProfile_baseline",
}
