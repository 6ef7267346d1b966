"""What one run of a container starts with, resolved from the pod before its shim starts.

The run's user and capabilities (securitycontext.py), its environment and argv
(environment.py), its mounts (volumes.py, from the pod's sandbox) and cgroups, then
the shim's spec. Resolving can fail for reasons the pod's author must fix (a missing
ConfigMap key, no command, a user the image cannot run as): those are
`CONFIG_ERRORS`, which the worker reports as CreateContainerConfigError and retries;
kept apart from podworker.py so that the worker holds only the sequencing of a run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from localkube.kubelet import cgroups
from localkube.kubelet.environment import NoCommandError, build_argv, build_environment
from localkube.kubelet.images import ResolvedImage
from localkube.kubelet.podroot import DEFAULT_SCRATCH_BYTES
from localkube.kubelet.runtime import build_shim_spec
from localkube.kubelet.sandbox import PodSandbox
from localkube.kubelet.securitycontext import ContainerConfigError, build_security_profile
from localkube.kubelet.volumes import VolumeError, build_container_mounts

if TYPE_CHECKING:
    from localkube.kubelet.podhost import PodHost

CONFIG_ERRORS = (VolumeError, NoCommandError, ContainerConfigError, ValueError, OSError)


@dataclass(frozen=True)
class ContainerConfig:
    security: dict
    env: dict[str, str]
    argv: list[str]
    mounts: list[dict]
    cgroups: list[str]


async def resolve_container_config(
    host: PodHost, pod: dict, spec: dict, image: ResolvedImage, sandbox: PodSandbox
) -> ContainerConfig:
    """Everything the run needs from the pod; raises one of CONFIG_ERRORS when it cannot run."""
    security = build_security_profile(pod, spec)
    env = await build_environment(pod, spec, image, sandbox.ips(), host.api_port, host.get_object)
    argv = build_argv(spec, image, env)
    mounts = build_container_mounts(spec, sandbox.volume_paths, sandbox.etc_files)
    groups = cgroups.create_container_cgroups(host.state_hash, sandbox.uid, spec)
    return ContainerConfig(security, env, argv, mounts, groups)


def measure_scratch_bytes(spec: dict) -> int:
    """The size of each of the container's memory-backed directories (/tmp, /var/tmp,
    /dev/shm, /run): its memory limit, which their pages are charged against anyway, as
    Kubernetes sizes an emptyDir of medium Memory; without a limit, DEFAULT_SCRATCH_BYTES."""
    limit = ((spec.get("resources") or {}).get("limits") or {}).get("memory")
    if limit is None:
        return DEFAULT_SCRATCH_BYTES
    field = f"containers[{spec['name']}].resources.limits.memory"
    return max(1, int(cgroups.parse_quantity(limit, field)))


def build_run_spec(
    pod: dict,
    spec: dict,
    restart_count: int,
    image: ResolvedImage,
    sandbox: PodSandbox,
    config: ContainerConfig,
) -> dict:
    """The shim's spec for this run (creating its directories)."""
    return build_shim_spec(
        pod,
        sandbox.dir,
        spec,
        restart_count,
        netns_path=sandbox.netns_path(),
        security=config.security,
        mounts=config.mounts,
        host_dirs=image.host_dirs,
        scratch_bytes=measure_scratch_bytes(spec),
        cgroups=config.cgroups,
        argv=config.argv,
        env=config.env,
    )


def describe_exec_context(config: ContainerConfig, shim_spec: dict) -> dict:
    """What exec sessions into the container run with (kept in state.json)."""
    return {"env": config.env, "workingDir": shim_spec["workingDir"], "security": config.security}
