"""Run a bundle's training program as a TensorFlow cluster of local processes.

Why this exists: the example bundles must be checked (and benchmarked) as real
multi-process TensorFlow jobs without Airflow or Kubernetes. This launcher
gives every replica what the pod bootstrap would give it, built by the
platform's own ClusterSpec code (`tfjob.clusterspec`) (docs/architecture.md,
"The pod protocol"): TF_CONFIG, the legacy PS_HOSTS/WORKER_HOSTS/CHIEF_HOSTS/
JOB_NAME/TASK_INDEX, DATA_DIR, MODEL_DIR, LOG_DIR, METRICS_FILE, TFJOB_ROLE,
TFJOB_INDEX, TFJOB_UPLOAD_MODEL, `code/` as working directory, and the
program's argv with `$(NAME)` expanded against that environment by the
bootstrap's own expansion (`runtime.expansion`).

Guarantees:
- every replica gets its own workspace (`<workdir>/<role>-<index>/`), as every
  pod gets its own emptyDir;
- all replicas listen on 127.0.0.1 with distinct free ports: TensorFlow's gRPC
  server binds 0.0.0.0:<port> whatever host the ClusterSpec names;
- scikit-learn is hidden from the replicas (an importable stub that raises
  ImportError): the TensorFlow image has none, and with it present
  `import tensorflow` spends ~2 s of CPU importing it through Keras' sklearn
  wrapper, in every replica, on a 2-core machine;
- every replica runs in its own process group, and `stop()` (also on leaving
  the `with` block) kills each group and reaps it: ps and workers of a
  parameter-server job never exit by themselves, and nothing may be left
  behind.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runtime.expansion import expand_argv
from tfjob.clusterspec import build_legacy_env, build_tf_config
from tfjob.request.model import Role

LOOPBACK = "127.0.0.1"
ROLE_ORDER = ("chief", "ps", "worker")
POLL_INTERVAL_S = 0.2
HIDDEN_MODULES = ("sklearn",)
LOG_TAIL_CHARS = 4000


class ReplicaFailed(RuntimeError):
    """A replica exited with a non-zero code, or did not finish in time."""


@dataclass
class LocalReplica:
    """One replica process and the paths of its workspace."""

    role: str
    index: int
    workspace: Path
    process: subprocess.Popen | None = None
    log_path: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log_path = self.workspace / "logs" / f"{self.role}-{self.index}.log"

    @property
    def name(self) -> str:
        return f"{self.role}-{self.index}"

    @property
    def model_dir(self) -> Path:
        return self.workspace / "model"

    @property
    def metrics_file(self) -> Path:
        return self.workspace / "metrics.json"

    def read_metrics(self) -> dict:
        """Return the JSON the program wrote to its METRICS_FILE."""
        return json.loads(self.metrics_file.read_text())

    def read_log_tail(self) -> str:
        """Return the end of the replica's combined stdout/stderr."""
        if not self.log_path.exists():
            return "(no log)"
        return self.log_path.read_text(errors="replace")[-LOG_TAIL_CHARS:]


def allocate_free_ports(count: int) -> list[int]:
    """Return `count` distinct ports that are free on all addresses right now."""
    sockets = []
    try:
        for _ in range(count):
            probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            probe.bind(("", 0))  # 0.0.0.0: TensorFlow's servers bind there
            sockets.append(probe)
        return [probe.getsockname()[1] for probe in sockets]
    finally:
        for probe in sockets:
            probe.close()


def build_cluster(replicas: Mapping[str, int], ports: Sequence[int]) -> dict[str, list[str]]:
    """Return the ClusterSpec dict {role: ["127.0.0.1:port", ...]} for the replica counts."""
    unknown = sorted(set(replicas) - set(ROLE_ORDER))
    if unknown:
        raise ValueError(f"replicas: unknown role(s) {unknown}; allowed: {list(ROLE_ORDER)}")
    cluster: dict[str, list[str]] = {}
    free_ports = iter(ports)
    for role in ROLE_ORDER:
        count = replicas.get(role, 0)
        if count:
            cluster[role] = [f"{LOOPBACK}:{next(free_ports)}" for _ in range(count)]
    return cluster


def pick_model_owner(replicas: Mapping[str, int]) -> tuple[str, int]:
    """Return (role, index) of the replica that writes the model: chief, else worker 0."""
    return ("chief", 0) if replicas.get("chief") else ("worker", 0)


def write_hiding_stubs(stub_dir: Path, modules: Sequence[str]) -> Path:
    """Write packages that raise ImportError, to be put first on PYTHONPATH."""
    for module in modules:
        package = stub_dir / module
        package.mkdir(parents=True, exist_ok=True)
        (package / "__init__.py").write_text(
            f"raise ImportError({module!r} + ' is hidden from local TensorFlow replicas')\n"
        )
    return stub_dir


def build_replica_env(
    cluster: Mapping[str, list[str]],
    role: str,
    index: int,
    workspace: Path,
    data_dir: Path,
    owns_model: bool,
    distributed: bool = True,
) -> dict[str, str]:
    """Return the environment the pod bootstrap would give this replica.

    A single-mode replica gets no TF_CONFIG and no legacy cluster variables.
    """
    env = {}
    if distributed:
        # The platform's own builders, so local runs see what pods see.
        env = {"TF_CONFIG": json.dumps(build_tf_config(cluster, Role(role), index))}
        env |= build_legacy_env(cluster, Role(role), index)
    return env | {
        "TFJOB_ROLE": role,
        "TFJOB_INDEX": str(index),
        "TFJOB_UPLOAD_MODEL": "1" if owns_model else "0",
        "DATA_DIR": str(data_dir),
        "MODEL_DIR": str(workspace / "model"),
        "LOG_DIR": str(workspace / "logs"),
        "METRICS_FILE": str(workspace / "metrics.json"),
        "PYTHONUNBUFFERED": "1",
        "TF_CPP_MIN_LOG_LEVEL": "1",
    }


class LocalTFCluster:
    """Launch, await and stop the replicas of one bundle on this machine.

    Usage:
        with LocalTFCluster(bundle_dir, {"chief": 1, "ps": 1, "worker": 2}, tmp_path) as job:
            owner = job.wait_for_owner(timeout_s=120)
            metrics = owner.read_metrics()
    """

    def __init__(
        self,
        bundle_dir: Path,
        replicas: Mapping[str, int],
        workdir: Path,
        entrypoint: Sequence[str] = ("train.py",),
        extra_env: Mapping[str, str] | None = None,
        distributed: bool = True,
    ) -> None:
        self.bundle_dir = Path(bundle_dir)
        self.distributed = distributed
        self.replica_counts = {role: count for role, count in replicas.items() if count}
        self.workdir = Path(workdir)
        self.entrypoint = list(entrypoint)
        self.extra_env = dict(extra_env or {})
        total = sum(self.replica_counts.values())
        self.cluster = build_cluster(self.replica_counts, allocate_free_ports(total))
        self.owner_key = pick_model_owner(self.replica_counts)
        self.replicas = [
            LocalReplica(role, index, self.workdir / f"{role}-{index}")
            for role in ROLE_ORDER
            for index in range(self.replica_counts.get(role, 0))
        ]

    @classmethod
    def from_request(cls, bundle_dir: Path, request: Any, workdir: Path) -> LocalTFCluster:
        """Build the cluster a `tfjob.request.model.TrainingRequest` describes.

        Replicas, entrypoint, args and env come from the request; a leading
        `python`/`python3` in the entrypoint becomes this interpreter, and
        `$(NAME)` in the rest is expanded per replica when it starts.
        """
        argv = [*request.entrypoint, *request.args]
        if Path(argv[0]).name.startswith("python"):
            argv = argv[1:]
        else:
            raise ValueError(
                f"entrypoint {request.entrypoint!r} given; local runs need a python entrypoint"
            )
        return cls(
            bundle_dir,
            request.replicas.model_dump(),
            workdir,
            entrypoint=argv,
            extra_env=request.env,
            distributed=request.is_distributed,
        )

    def __enter__(self) -> LocalTFCluster:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def replica(self, role: str, index: int) -> LocalReplica:
        """Return the replica with this role and index."""
        for candidate in self.replicas:
            if (candidate.role, candidate.index) == (role, index):
                return candidate
        raise KeyError(f"no replica {role}-{index}; have {[r.name for r in self.replicas]}")

    @property
    def owner(self) -> LocalReplica:
        """The replica that writes the model and the metrics."""
        return self.replica(*self.owner_key)

    def start(self) -> None:
        """Start every replica as its own process group, ps first."""
        code_dir = self.bundle_dir / "code"
        data_dir = self.bundle_dir / "data"
        stub_dir = write_hiding_stubs(self.workdir / "hidden-modules", HIDDEN_MODULES)
        python_path = os.pathsep.join(
            filter(None, [str(stub_dir), os.environ.get("PYTHONPATH", "")])
        )
        try:
            for replica in self.replicas:
                replica.log_path.parent.mkdir(parents=True, exist_ok=True)
                env = dict(os.environ)
                env.update(
                    build_replica_env(
                        self.cluster,
                        replica.role,
                        replica.index,
                        replica.workspace,
                        data_dir,
                        owns_model=(replica.role, replica.index) == self.owner_key,
                        distributed=self.distributed,
                    )
                )
                env["PYTHONPATH"] = python_path
                env.update(self.extra_env)
                argv = expand_argv(self.entrypoint, env)  # as the pod's bootstrap does
                with open(replica.log_path, "wb") as log:
                    replica.process = subprocess.Popen(
                        [sys.executable, *argv],
                        cwd=code_dir,
                        env=env,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
        except BaseException:
            self.stop()
            raise

    def wait_for_owner(self, timeout_s: float) -> LocalReplica:
        """Wait until the model owner exits 0; fail early if any replica exits non-zero."""
        return self.wait_for_exit(self.owner, timeout_s)

    def wait_for_exit(self, replica: LocalReplica, timeout_s: float) -> LocalReplica:
        """Wait until `replica` exits 0 and return it.

        Raises ReplicaFailed (with the log tail) when it, or any other replica,
        exits non-zero, or when the deadline passes.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            for other in self.replicas:
                code = other.process.poll() if other.process else None
                if code not in (None, 0):
                    raise ReplicaFailed(
                        f"{other.name} exited with code {code}; log tail:\n{other.read_log_tail()}"
                    )
            if replica.process.poll() == 0:
                return replica
            if time.monotonic() > deadline:
                raise ReplicaFailed(
                    f"{replica.name} still running after {timeout_s:.0f} s; log tail:\n"
                    f"{replica.read_log_tail()}"
                )
            time.sleep(POLL_INTERVAL_S)

    def stop(self) -> None:
        """Kill every replica's process group and reap it (idempotent)."""
        for replica in self.replicas:
            process = replica.process
            if process is None:
                continue
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            process.wait()
