"""Pod volumes, materialised on the host and bind-mounted by the shim.

Every volume lives in DIR/kubelet/pods/<uid>/volumes/<name>/ (emptyDir, and
the files of configMap, secret, downwardAPI and projected sources); hostPath
points at the host path itself. `build_container_mounts` gives the shim its
list of {source, target, readOnly} (subPath resolved), plus the pod's
/etc/hosts and /etc/hostname. Objects are read through the API (GET
configmaps/secrets), like a real kubelet.

Permissions are a real kubelet's, so that a non-root container can use its volumes: an
emptyDir is 0777; configMap, secret, downwardAPI and projected files get their mode
(items[].mode, defaultMode, 0644 by default); with the pod's `fsGroup` every volume is
group-owned by it (setgid directories; object files also get g+r, an emptyDir g+rw), as
the kubelet's SetVolumeOwnership does. A secret file of mode 0400 is thus 0440 root:fsGroup,
readable by the pod's user through its fsGroup and by no other non-root user.

Like a real kubelet, configMap, secret and projected volumes of running pods
follow their objects: `refresh_object_volumes` (called periodically by the
agent) rewrites each file whose content changed, atomically (temp + rename),
so a process that re-reads the file sees the new value; subPath mounts are
not updated (as on Kubernetes).
"""

from __future__ import annotations

import base64
import json
import os
import stat
from collections.abc import Awaitable, Callable

from localkube.kubelet.errors import KubeletError

ObjectGetter = Callable[[str, str, str], Awaitable[dict | None]]
DEFAULT_MODE = 0o644
EMPTY_DIR_MODE = 0o777
OBJECT_DIR_MODE = 0o755
READ_ONLY_GROUP_BITS = 0o440  # the kubelet's roMask: what fsGroup adds to object files
READ_WRITE_GROUP_BITS = 0o660  # rwMask: what it adds to emptyDir content
GROUP_SEARCH_BITS = 0o110  # execMask: what it adds to directories
SUPPORTED_VOLUME_KINDS = ("emptyDir", "hostPath", "configMap", "secret", "downwardAPI", "projected")


class VolumeError(KubeletError):
    """A volume cannot be set up yet (e.g. a missing ConfigMap); the kubelet retries."""


def resolve_field_path(pod: dict, path: str, pod_ip: str | None, host_ip: str) -> str:
    """The value of a downward-API fieldPath (metadata.name, status.podIP, ...)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName") or "default",
        "status.podIP": pod_ip,
        "status.podIPs": pod_ip,
        "status.hostIP": host_ip,
        "status.hostIPs": host_ip,
    }
    if path in simple:
        return simple[path] or ""
    for prefix, mapping in (
        ("metadata.labels", meta.get("labels")),
        ("metadata.annotations", meta.get("annotations")),
    ):
        mapping = mapping or {}
        if path == prefix:
            return "\n".join(f'{k}="{v}"' for k, v in sorted(mapping.items()))
        if path.startswith(prefix + "['") and path.endswith("']"):
            return mapping.get(path[len(prefix) + 2 : -2], "")
    allowed = sorted(simple) + ["metadata.labels['KEY']", "metadata.annotations['KEY']"]
    raise VolumeError(
        f"fieldRef.fieldPath: {path!r} is not supported; allowed: {', '.join(allowed)}"
    )


def read_fs_group(pod: dict) -> int | None:
    fs_group = ((pod.get("spec") or {}).get("securityContext") or {}).get("fsGroup")
    return None if fs_group is None else int(fs_group)


def set_dir_ownership(path: str, mode: int, fs_group: int | None, writable: bool) -> None:
    """A volume directory's mode; with fsGroup, group-owned by it, setgid, group-searchable."""
    if fs_group is not None:
        os.chown(path, -1, fs_group)
        mode |= stat.S_ISGID | GROUP_SEARCH_BITS | (READ_WRITE_GROUP_BITS if writable else 0)
    os.chmod(path, mode)


def make_volume_dirs(directory: str, parent: str, fs_group: int | None) -> None:
    """`parent` and the directories between it and the volume's root, as the volume's own."""
    missing = []
    while parent != directory and not os.path.isdir(parent):
        missing.append(parent)
        parent = os.path.dirname(parent)
    for path in reversed(missing):
        os.makedirs(path, exist_ok=True)
        set_dir_ownership(path, OBJECT_DIR_MODE, fs_group, writable=False)


def write_file(
    directory: str, relpath: str, data: bytes, mode: int, fs_group: int | None = None
) -> None:
    path = os.path.normpath(os.path.join(directory, relpath))
    if not path.startswith(os.path.normpath(directory) + os.sep):
        raise VolumeError(f"volume item path: {relpath!r} escapes the volume")
    make_volume_dirs(os.path.normpath(directory), os.path.dirname(path), fs_group)
    gid = 0 if fs_group is None else fs_group
    if fs_group is not None:
        mode |= READ_ONLY_GROUP_BITS
    if _holds(path, data, mode, gid):
        return
    tmp = path + ".lktmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.chown(tmp, 0, gid)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def _holds(path: str, data: bytes, mode: int, gid: int) -> bool:
    """The file exists with exactly these bytes, mode and group (nothing to rewrite)."""
    try:
        st = os.stat(path)
        if st.st_mode & 0o7777 != mode or st.st_gid != gid or st.st_size != len(data):
            return False
        with open(path, "rb") as f:
            return f.read() == data
    except OSError:
        return False


def select_items(
    data: dict[str, bytes], items: list[dict] | None, default_mode: int
) -> list[tuple[str, bytes, int]]:
    if not items:
        return [(k, v, default_mode) for k, v in data.items()]
    chosen = []
    for item in items:
        if item["key"] not in data:
            raise VolumeError(f"configmap/secret key {item['key']!r} not found")
        chosen.append(
            (item.get("path") or item["key"], data[item["key"]], item.get("mode") or default_mode)
        )
    return chosen


async def read_source_data(
    kind: str, source: dict, namespace: str, get: ObjectGetter
) -> dict[str, bytes] | None:
    name = source.get("name") or source.get("secretName")
    obj = await get(kind, namespace, name)
    if obj is None:
        if source.get("optional"):
            return None
        if kind == "configmaps" and name == "kube-root-ca.crt":
            return {"ca.crt": b""}
        raise VolumeError(f'{kind[:-1]} "{name}" not found')
    if kind == "secrets":
        data = {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
        data.update({k: v.encode() for k, v in (obj.get("stringData") or {}).items()})
        return data
    data = {k: v.encode() for k, v in (obj.get("data") or {}).items()}
    data.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
    return data


async def fill_source(
    directory: str,
    kind: str,
    source: dict,
    pod: dict,
    ips: tuple[str | None, str],
    get: ObjectGetter,
    mode: int,
) -> None:
    namespace = pod["metadata"]["namespace"]
    fs_group = read_fs_group(pod)
    if kind in ("configMap", "secret"):
        api_kind = "configmaps" if kind == "configMap" else "secrets"
        data = await read_source_data(api_kind, source, namespace, get)
        if data is None:
            return
        for rel, blob, item_mode in select_items(
            data, source.get("items"), source.get("defaultMode") or mode
        ):
            write_file(directory, rel, blob, item_mode, fs_group)
    elif kind == "downwardAPI":
        for item in source.get("items") or []:
            if "fieldRef" in item:
                value = resolve_field_path(pod, item["fieldRef"]["fieldPath"], *ips)
            else:
                value = resolve_resource_field(pod, item.get("resourceFieldRef") or {})
            write_file(directory, item["path"], value.encode(), item.get("mode") or mode, fs_group)
    elif kind == "serviceAccountToken":
        write_file(
            directory, source.get("path") or "token", b"localkube-unauthenticated", mode, fs_group
        )


def resolve_resource_field(pod: dict, ref: dict, container_name: str | None = None) -> str:
    """resourceFieldRef: limits.cpu/limits.memory/requests.* of the named container."""
    name = ref.get("containerName") or container_name
    resource = ref.get("resource", "")
    for c in (pod.get("spec") or {}).get("containers") or []:
        if c["name"] == name:
            section, _, key = resource.partition(".")
            value = ((c.get("resources") or {}).get(section) or {}).get(key)
            if value is None:
                return "0"
            from localkube.kubelet.cgroups import parse_quantity

            number = parse_quantity(value, f"resourceFieldRef {resource}")
            divisor = parse_quantity(ref.get("divisor") or "1", "resourceFieldRef.divisor")
            return (
                str(max(1, int(-(-number // divisor))))
                if key == "cpu"
                else str(int(number // divisor))
            )
    return "0"


async def materialize_volumes(
    pod: dict, pod_dir: str, ips: tuple[str | None, str], get: ObjectGetter
) -> dict[str, str]:
    """Create every volume of the pod; returns volume name -> host path."""
    paths = {}
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        name = volume["name"]
        kinds = [k for k in volume if k != "name"]
        if not any(k in SUPPORTED_VOLUME_KINDS for k in kinds):
            raise VolumeError(
                f"volume {name!r}: type {kinds} is not supported by localkube; "
                f"supported: {', '.join(SUPPORTED_VOLUME_KINDS)}"
            )
        if "hostPath" in volume:
            host = volume["hostPath"]["path"]
            if volume["hostPath"].get("type") in ("DirectoryOrCreate",):
                os.makedirs(host, exist_ok=True)
            paths[name] = host
            continue
        directory = os.path.join(pod_dir, "volumes", name)
        os.makedirs(directory, exist_ok=True)
        if "emptyDir" in volume:
            set_dir_ownership(directory, EMPTY_DIR_MODE, read_fs_group(pod), writable=True)
        else:
            set_dir_ownership(directory, OBJECT_DIR_MODE, read_fs_group(pod), writable=False)
        paths[name] = directory
        for kind in ("configMap", "secret", "downwardAPI"):
            if kind in volume:
                await fill_source(
                    directory,
                    kind,
                    volume[kind],
                    pod,
                    ips,
                    get,
                    volume[kind].get("defaultMode") or DEFAULT_MODE,
                )
        if "projected" in volume:
            projected = volume["projected"]
            mode = projected.get("defaultMode") or DEFAULT_MODE
            for source in projected.get("sources") or []:
                for kind, sub in source.items():
                    await fill_source(directory, kind, sub, pod, ips, get, mode)
    return paths


async def refresh_object_volumes(
    pod: dict, volume_paths: dict[str, str], ips: tuple[str | None, str], get: ObjectGetter
) -> None:
    """Rewrite the files of the pod's configMap, secret and projected volumes that changed."""
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        directory = volume_paths.get(volume["name"])
        if directory is None:
            continue
        for kind in ("configMap", "secret"):
            if kind in volume:
                await fill_source(
                    directory,
                    kind,
                    volume[kind],
                    pod,
                    ips,
                    get,
                    volume[kind].get("defaultMode") or DEFAULT_MODE,
                )
        if "projected" in volume:
            mode = volume["projected"].get("defaultMode") or DEFAULT_MODE
            for source in volume["projected"].get("sources") or []:
                for kind, sub in source.items():
                    if kind in ("configMap", "secret"):
                        await fill_source(directory, kind, sub, pod, ips, get, mode)


def write_etc_files(pod: dict, pod_dir: str, pod_ip: str | None) -> dict[str, str]:
    name = pod["metadata"]["name"]
    hostname = (pod.get("spec") or {}).get("hostname") or name
    etc = os.path.join(pod_dir, "etc")
    os.makedirs(etc, exist_ok=True)
    hosts = (
        "# Kubernetes-managed hosts file (localkube).\n127.0.0.1\tlocalhost\n"
        "::1\tlocalhost ip6-localhost ip6-loopback\n"
    )
    if pod_ip:
        hosts += f"{pod_ip}\t{hostname}\n"
    for alias in (pod.get("spec") or {}).get("hostAliases") or []:
        hosts += f"{alias['ip']}\t{' '.join(alias.get('hostnames') or [])}\n"
    files = {"/etc/hosts": hosts, "/etc/hostname": hostname + "\n"}
    out = {}
    for target, text in files.items():
        path = os.path.join(etc, os.path.basename(target))
        with open(path, "w") as f:
            f.write(text)
        out[target] = path
    return out


def build_container_mounts(
    container: dict, volume_paths: dict[str, str], etc_files: dict[str, str]
) -> list[dict]:
    mounts = [
        {"source": src, "target": target, "readOnly": False} for target, src in etc_files.items()
    ]
    for vm in container.get("volumeMounts") or []:
        name = vm["name"]
        if name not in volume_paths:
            raise VolumeError(
                f'containers[{container["name"]}].volumeMounts: volume "{name}" '
                "is not a volume of the pod"
            )
        source = volume_paths[name]
        if vm.get("subPath"):
            root, source = source, os.path.join(source, vm["subPath"])
            if not os.path.exists(source):
                os.makedirs(source, exist_ok=True)
                st = os.stat(root)  # like the kubelet: a new subPath is made like its volume
                os.chown(source, -1, st.st_gid)
                os.chmod(source, stat.S_IMODE(st.st_mode))
        mounts.append(
            {"source": source, "target": vm["mountPath"], "readOnly": bool(vm.get("readOnly"))}
        )
    return mounts


def describe_mounts(mounts: list[dict]) -> str:
    return json.dumps(mounts)
