"""A real S3 server process for tests: scripts/s3_server.py (moto + presign checks) on a free port.

A pytest plugin (tests/conftest.py registers it): any test takes the fixtures by name.

    def test_something(s3_server, s3_client):
        s3_client.put_object(Bucket=s3_server.bucket, Key="k", Body=b"x")

`s3_server` is module-scoped (one process per test module, ~2 s to start);
it yields an `S3Server` with endpoint, credentials, bucket names and `env()`
(the AWS_* variables that make boto3 and tshell talk to it). Its admin key is
the one the server generated in its state dir (credentials.json); each tenant
of deploy/tenants.yaml has a pods identity (pod_identities.json, secrets
generated per server), which `pods_presigner(tenant)` signs with, as Airflow's
`tfjob_pods_<tenant>` connection does (`airflow_connections()`). Buckets:
`tfjob-test` (default) and `tfjob-other`. Pods reach it through localkube
started with `forward_ports=(server.pod_forward(),)`: the pod-facing listener,
only requests presigned by a pods identity, within its reach.

The server keeps what it acknowledged under its state dir (`start_s3_server`'s
`state_dir`, by default `<workdir>/s3-state`): a server started again on the
same state dir serves the same buckets and objects (tests/s3/test_s3_persistence.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from harness.repo_root import REPO_ROOT
from tfjob.tenants import TenantsConfig, load_tenants
from tfjob.tenants.model import default_presign_conn_id

REPO = REPO_ROOT
SERVER_SCRIPT = REPO / "scripts" / "s3_server.py"
from scripts.s3_identities import ensure_admin_credentials, write_pod_identities  # noqa: E402

REGION = "us-east-1"
BUCKETS = ("tfjob-test", "tfjob-other")
START_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    access_key: str
    secret_key: str
    region: str
    buckets: tuple[str, ...]
    pid: int
    pod_endpoint: str = ""  # the pod-facing listener: pods identities' grants only
    # tenant -> (access key, secret) of its pods-only presigning identity
    pod_identities: dict[str, tuple[str, str]] = field(default_factory=dict)

    @property
    def bucket(self) -> str:
        return self.buckets[0]

    def pod_forward(self) -> str:
        """localkube's `--forward` for this server: the pods' 127.0.0.1:<port> to the
        pod-facing listener (presigned URLs name 127.0.0.1:<port>, and so does the Host
        header a pod sends)."""
        port = self.endpoint.rsplit(":", 1)[1]
        return f"{port}={self.pod_endpoint.split('://', 1)[1]}"

    def env(self) -> dict[str, str]:
        """Environment variables that point boto3 (and so tshell) at this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": self.region,
        }

    def client(self, config=None):  # type: ignore[no-untyped-def]
        """A boto3 client of the host's listener, holding the server's key."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=self.region,
            config=config,
        )

    def presigner(self):  # type: ignore[no-untyped-def]
        """A SigV4 presigning client with the admin key: its grants work on the host's
        listener only (the pods' listener refuses them)."""
        from botocore.config import Config

        return self.client(Config(signature_version="s3v4"))

    def pods_presigner(self, tenant: str = "test"):  # type: ignore[no-untyped-def]
        """A client that presigns as the product does for pods: SigV4 with the tenant's
        pods identity (operators/grants.py with `tfjob_pods_<tenant>`)."""
        import boto3
        from botocore.config import Config

        access_key, secret_key = self.pod_identities[tenant]
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=access_key,
            aws_secret_access_key=secret_key,
            region_name=self.region,
            config=Config(signature_version="s3v4"),
        )

    def moto_api(self, path: str, method: str = "GET") -> tuple[int, bytes]:
        """(status, body) of moto's own API on the host's listener (`/moto-api/<path>`),
        signed with the admin key as the server requires."""
        import urllib.error
        import urllib.request

        from botocore.auth import S3SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials

        url = f"{self.endpoint}/moto-api/{path.lstrip('/')}"
        signed = AWSRequest(method=method, url=url, data=b"")
        S3SigV4Auth(Credentials(self.access_key, self.secret_key), "s3", self.region).add_auth(
            signed
        )
        request = urllib.request.Request(url, method=method, headers=dict(signed.headers))
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return answer.status, answer.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()

    def airflow_connections(self) -> dict[str, str]:
        """AIRFLOW_CONN_* for this server: aws_default (admin) and tfjob_pods_<tenant> each."""
        found = {"AIRFLOW_CONN_AWS_DEFAULT": self._connection(self.access_key, self.secret_key)}
        for tenant, (access_key, secret_key) in self.pod_identities.items():
            name = "AIRFLOW_CONN_" + default_presign_conn_id(tenant).upper()
            found[name] = self._connection(access_key, secret_key)
        return found

    def _connection(self, access_key: str, secret_key: str) -> str:
        return json.dumps(
            {
                "conn_type": "aws",
                "login": access_key,
                "password": secret_key,
                "extra": {"endpoint_url": self.endpoint, "region_name": self.region},
            }
        )


def start_s3_server(
    workdir: Path, buckets: tuple[str, ...] = BUCKETS, state_dir: Path | None = None
) -> tuple[S3Server, subprocess.Popen[bytes]]:
    """Start the server process on a free loopback port and wait until it serves.

    It keeps its data in state_dir (default: <workdir>/s3-state); start it again on the
    same state_dir to find it there. Each tenant of deploy/tenants.yaml gets a pods
    identity (kept, like the admin key, when the state dir is used again)."""
    state = state_dir or workdir / "s3-state"
    identities = write_pod_identities(
        state, [(t.name, t.output_prefixes) for t in load_tenants().tenants]
    )
    admin = ensure_admin_credentials(state)
    ready = workdir / "s3-ready.json"
    ready.unlink(missing_ok=True)  # a server started before in this workdir wrote one
    command = [
        sys.executable,
        str(SERVER_SCRIPT),
        "serve",
        "--port",
        "0",
        "--state-dir",
        str(state),
        "--ready-file",
        str(ready),
        "--region",
        REGION,
    ]
    for bucket in buckets:
        command += ["--bucket", bucket]
    log = open(workdir / "s3-server.log", "wb")  # noqa: SIM115 - closed with the process
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    log.close()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not ready.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(
                f"S3 server did not start: {(workdir / 's3-server.log').read_text()[-2000:]}"
            )
        time.sleep(0.05)
    info = json.loads(ready.read_text())
    server = S3Server(
        info["endpoint"],
        admin.access_key,
        admin.secret_key,
        REGION,
        tuple(buckets),
        process.pid,
        info["pod_endpoint"],
        {tenant: (each.access_key, each.secret_key) for tenant, each in identities.items()},
    )
    return server, process


def add_pod_identities(server: S3Server, state_dir: Path, tenants: TenantsConfig) -> None:
    """Pods identities for `tenants`' tenants too (a tenant that has one keeps it): the
    server re-reads its identities file when it changes; `server.airflow_connections()`
    then names every one."""
    current = {t.name: t.output_prefixes for t in load_tenants().tenants}
    current.update({t.name: t.output_prefixes for t in tenants.tenants})
    identities = write_pod_identities(state_dir, current.items())
    server.pod_identities.update(
        {tenant: (each.access_key, each.secret_key) for tenant, each in identities.items()}
    )


def stop_s3_server(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def kill_s3_server(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL: the server gets no chance to tidy up, as in a crash."""
    process.kill()
    process.wait()


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    server, process = start_s3_server(tmp_path_factory.mktemp("s3"))
    try:
        yield server
    finally:
        stop_s3_server(process)


@pytest.fixture
def s3_client(s3_server: S3Server):  # type: ignore[no-untyped-def]
    return s3_server.client()


@pytest.fixture
def s3_env(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Point boto3 in this process at the server (and return the variables for subprocesses)."""
    env = s3_server.env()
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    return {**os.environ, **env}
