"""A container's environment and argv, with Kubernetes semantics.

Order as in the kubelet: image defaults (PATH, HOME, HOSTNAME), service
variables for the API server, envFrom sources, then env entries (later wins),
each value expanded for $(VAR) references to earlier variables; command and
args are expanded the same way. command replaces the image's entrypoint, args
its cmd; with neither, the image's cmd from images.yaml runs.
"""

from __future__ import annotations

import re

from localkube.kubelet.errors import KubeletError
from localkube.kubelet.images import ResolvedImage
from localkube.kubelet.volumes import (
    ObjectGetter,
    VolumeError,
    resolve_field_path,
    resolve_resource_field,
)

GPU_ANNOTATION = "localkube.io/gpu-ids"
REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


class NoCommandError(KubeletError):
    """Neither the container nor its image names a command."""


def expand_references(text: str, env: dict[str, str]) -> str:
    """$(VAR) -> value when defined, $$ -> $, anything else unchanged (Kubernetes rules)."""

    def replace(match: re.Match) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env[name] if name in env else match.group(0)

    return REFERENCE.sub(replace, text)


async def read_key(kind: str, ref: dict, namespace: str, get: ObjectGetter) -> str | None:
    import base64

    obj = await get(kind, namespace, ref["name"])
    if obj is None:
        if ref.get("optional"):
            return None
        raise VolumeError(f'{kind[:-1]} "{ref["name"]}" not found')
    if kind == "secrets":
        data = obj.get("data") or {}
        if ref["key"] in data:
            return base64.b64decode(data[ref["key"]]).decode(errors="replace")
        value = (obj.get("stringData") or {}).get(ref["key"])
    else:
        value = (obj.get("data") or {}).get(ref["key"])
    if value is None and not ref.get("optional"):
        raise VolumeError(
            f"couldn't find key {ref['key']} in {kind[:-1]} {namespace}/{ref['name']}"
        )
    return value


async def build_environment(
    pod: dict,
    container: dict,
    image: ResolvedImage,
    ips: tuple[str | None, str],
    api_port: int | None,
    get: ObjectGetter,
) -> dict[str, str]:
    meta = pod["metadata"]
    namespace = meta["namespace"]
    env: dict[str, str] = {
        "PATH": image.path,
        "HOME": "/root",
        "HOSTNAME": (pod.get("spec") or {}).get("hostname") or meta["name"],
        "NVIDIA_VISIBLE_DEVICES": (meta.get("annotations") or {}).get(GPU_ANNOTATION) or "void",
    }
    if api_port:
        env.update(
            {
                "KUBERNETES_SERVICE_HOST": "127.0.0.1",
                "KUBERNETES_SERVICE_PORT": str(api_port),
                "KUBERNETES_PORT": f"tcp://127.0.0.1:{api_port}",
            }
        )
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix") or ""
        for kind, key in (("configmaps", "configMapRef"), ("secrets", "secretRef")):
            if key not in source:
                continue
            ref = source[key]
            obj = await get(kind, namespace, ref["name"])
            if obj is None:
                if ref.get("optional"):
                    continue
                raise VolumeError(f'{kind[:-1]} "{ref["name"]}" not found')
            data = obj.get("data") or {}
            for k, v in data.items():
                if kind == "secrets":
                    import base64

                    v = base64.b64decode(v).decode(errors="replace")
                env[prefix + k] = v
    for item in container.get("env") or []:
        name = item["name"]
        if "valueFrom" not in item:
            env[name] = expand_references(item.get("value") or "", env)
            continue
        source = item["valueFrom"]
        value: str | None
        if "fieldRef" in source:
            value = resolve_field_path(pod, source["fieldRef"]["fieldPath"], *ips)
        elif "resourceFieldRef" in source:
            value = resolve_resource_field(pod, source["resourceFieldRef"], container["name"])
        elif "secretKeyRef" in source:
            value = await read_key("secrets", source["secretKeyRef"], namespace, get)
        elif "configMapKeyRef" in source:
            value = await read_key("configmaps", source["configMapKeyRef"], namespace, get)
        else:
            raise VolumeError(f"env[{name}].valueFrom: {sorted(source)} not supported")
        if value is not None:
            env[name] = value
    return env


def build_argv(container: dict, image: ResolvedImage, env: dict[str, str]) -> list[str]:
    command = container.get("command") or []
    args = container.get("args") or []
    if command:
        argv = list(command) + list(args)
    elif args:
        argv = list(args)  # host images have no ENTRYPOINT: args replace the image's cmd
    else:
        argv = list(image.cmd)
    if not argv:
        raise NoCommandError(
            f"containers[{container['name']}]: no command specified "
            f'and image "{image.image}" has none'
        )
    return [expand_references(a, env) for a in argv]
