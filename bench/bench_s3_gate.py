#!/usr/bin/env python3
"""The local S3 gate's cost per request: a pod's GET and POST upload, gate against no gate.

    .venv/bin/python bench/bench_s3_gate.py [--size-mib 1] [--requests 60] [--out FILE]

One moto store (the server's own stack: moto behind the persisting layer, on a
fresh state dir) served in this process by two listeners: the pods' one,
behind the gate exactly as scripts/s3_server.py builds it (pods identity
lookup, signature and policy checks, form reading, the reach rules), and one
with no gate at all. Each request is what a pod sends: a GET of a `size-mib`
object with a URL presigned by the tenant's pods identity, and a POST-policy
upload of `size-mib` bytes with its grant, each on a new connection (as the
pod's urllib does). The two listeners take turns request by request, so load
on the machine falls on both alike. Reported: the median time per request of
each, their ratio (target ≤ 1.2) and the median extra milliseconds.
"""

from __future__ import annotations

import argparse
import http.client
import json
import secrets
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

from bench.stats import summarise  # noqa: E402
from scripts.s3_checks import PresignChecker  # noqa: E402
from scripts.s3_gate import CheckingMiddleware  # noqa: E402
from scripts.s3_identities import (  # noqa: E402
    POD_IDENTITIES_FILE,
    Keyring,
    ensure_admin_credentials,
    write_pod_identities,
)
from scripts.s3_persist import PersistingMiddleware  # noqa: E402
from scripts.s3_store import locate_data_dir, open_store  # noqa: E402
from scripts.s3_sync import BackendMirror, install_change_tracking  # noqa: E402

MIB = 1024 * 1024
BUCKET = "bench"
REGION = "us-east-1"
RUN = "outputs/job/runs/tfjob__bench/manual__1/"  # a run's prefix, inside the tenant's reach
TARGET_RATIO = 1.2


def serve_store(state: Path) -> tuple[str, str, Any, list[Any]]:
    """(gated endpoint, plain endpoint, admin credentials, servers) over one moto store."""
    import os

    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    admin = ensure_admin_credentials(state)
    os.environ["AWS_ACCESS_KEY_ID"] = admin.access_key
    os.environ["AWS_SECRET_ACCESS_KEY"] = admin.secret_key
    store = open_store(locate_data_dir(state))
    install_change_tracking()
    mirror = BackendMirror(store)
    mirror.restore()
    moto = PersistingMiddleware(DomainDispatcherApplication(create_backend_app), mirror)
    keyring = Keyring({admin.access_key: admin.secret_key}, state / POD_IDENTITIES_FILE)
    gate = CheckingMiddleware(
        moto, PresignChecker(keyring, REGION), pod_facing=True, keyring=keyring
    )
    servers = []
    for app in (gate, moto):
        server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=MotoRequestHandler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
    gated, plain = (f"http://127.0.0.1:{s.server_port}" for s in servers)
    return gated, plain, admin, servers


def client_for(endpoint: str, key: str, secret: str) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=key,
        aws_secret_access_key=secret,
        region_name=REGION,
        config=Config(signature_version="s3v4"),
    )


def encode_form(fields: dict[str, str], data: bytes) -> tuple[bytes, str]:
    boundary = "bench-" + secrets.token_hex(8)
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
        for name, value in fields.items()
    ]
    parts.append(
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="blob"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n".encode()
    )
    return b"".join(parts) + data + f"\r\n--{boundary}--\r\n".encode(), boundary


def timed_request(url: str, method: str, body: bytes | None, headers: dict[str, str]) -> float:
    """Seconds from connecting to the last byte of the answer; fails on a non-2xx answer."""
    parts = urllib.parse.urlsplit(url)
    started = time.perf_counter()
    connection = http.client.HTTPConnection(parts.netloc, timeout=60)
    try:
        target = parts.path + ("?" + parts.query if parts.query else "")
        connection.request(method, target, body=body, headers=headers)
        answer = connection.getresponse()
        answer.read()
    finally:
        connection.close()
    elapsed = time.perf_counter() - started
    if not 200 <= answer.status < 300:
        raise RuntimeError(f"{method} {url}: {answer.status}")
    return elapsed


def measure(size_mib: int, requests: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-s3-gate-") as tmp:
        state = Path(tmp)
        identities = write_pod_identities(state, [("bench", [f"s3://{BUCKET}/outputs/"])])
        gated, plain, admin, servers = serve_store(state)
        try:
            return measure_against(gated, plain, admin, identities["bench"], size_mib, requests)
        finally:
            for server in servers:
                server.shutdown()


def measure_against(
    gated: str, plain: str, admin: Any, pods: Any, size_mib: int, requests: int
) -> dict[str, Any]:
    data = secrets.token_bytes(size_mib * MIB)
    host = client_for(plain, admin.access_key, admin.secret_key)
    host.create_bucket(Bucket=BUCKET)
    key = RUN + "checkpoints/blob"
    host.put_object(Bucket=BUCKET, Key=key, Body=data)
    cases: dict[str, dict[str, list[float]]] = {"get": {}, "post": {}}
    for name, endpoint in (("gate", gated), ("no gate", plain)):
        signer = client_for(endpoint, pods.access_key, pods.secret_key)
        url = signer.generate_presigned_url(
            "get_object", Params={"Bucket": BUCKET, "Key": key}, ExpiresIn=3600
        )
        post = signer.generate_presigned_post(
            BUCKET,
            RUN + "model/${filename}",
            Conditions=[["content-length-range", 0, 2 * size_mib * MIB]],
            ExpiresIn=3600,
        )
        body, boundary = encode_form(post["fields"], data)
        form_headers = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
        cases["get"][name] = [url]  # type: ignore[list-item]
        cases["post"][name] = [(post["url"], body, form_headers)]  # type: ignore[list-item]
    samples: dict[str, dict[str, list[float]]] = {
        kind: {"gate": [], "no gate": []} for kind in cases
    }
    for _ in range(requests):
        for name in ("gate", "no gate"):  # in turn, so both see the same machine
            (url,) = cases["get"][name]
            samples["get"][name].append(timed_request(url, "GET", None, {}))  # type: ignore[arg-type]
            ((post_url, body, headers),) = cases["post"][name]
            samples["post"][name].append(timed_request(post_url, "POST", body, headers))  # type: ignore[arg-type]
    result: dict[str, Any] = {
        "size_mib": size_mib,
        "requests": requests,
        "target_ratio": TARGET_RATIO,
        "cases": [],
    }
    for kind, label in (("get", "GET (presigned URL)"), ("post", "POST-policy upload")):
        gate = summarise(s * 1000 for s in samples[kind]["gate"])
        bare = summarise(s * 1000 for s in samples[kind]["no gate"])
        result["cases"].append(
            {
                "case": f"{label} of {size_mib} MiB",
                "gate_ms": gate.as_dict(),
                "no_gate_ms": bare.as_dict(),
                "ratio": gate.median / bare.median,
                "extra_ms": gate.median - bare.median,
            }
        )
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=1)
    parser.add_argument("--requests", type=int, default=60, help="of each kind, per side")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    result = measure(args.size_mib, args.requests)
    text = json.dumps(result, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
