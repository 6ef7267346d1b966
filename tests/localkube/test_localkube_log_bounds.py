"""A pod writing 1 GiB of log through the real kubelet: the log stays under its cap on disk,
the API server stays responsive while pods/log is polled, and nothing holds the log in memory.
"""

import http.client
import json
import time
import urllib.parse
from pathlib import Path

import pytest

from harness.poller import Poller
from localkube.logrotation import DEFAULT_LOG_ROTATION

pytestmark = [pytest.mark.e2e, pytest.mark.root, pytest.mark.slow]

MIB = 1024 * 1024
LOG_MIB = 1024
HEALTH_P95_S = 0.100
RSS_GROWTH_LIMIT = 64 * MIB
# Rotation happens before a write would pass the cap; one CRI line of a 16 KiB piece may pass it.
DISK_CAP = DEFAULT_LOG_ROTATION.max_bytes * DEFAULT_LOG_ROTATION.max_files + 64 * 1024
WRITER = (
    "import sys\n"
    "line = b'x' * (1024 * 1024 - 16)\n"
    "out = sys.stdout.buffer\n"
    f"for i in range({LOG_MIB}):\n"
    "    out.write(b'%015d' % i + line + b'\\n')\n"
    "out.write(b'end\\n')\n"
)


def connect(handle) -> http.client.HTTPSConnection:
    """A kept-alive connection, as a prober's: what is timed is the API server's answer, not a
    TLS handshake per call competing for the CPU."""
    url = urllib.parse.urlparse(handle.api_url)
    return http.client.HTTPSConnection(
        url.hostname, url.port, context=handle.ssl_context(), timeout=10
    )


def read_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def log_dir_bytes(directory: Path) -> int:
    """Bytes on disk of the log files, each inode once: while rotating, the full file has its
    rotated name and `path` for a moment (a hard link), which is one file on disk, not two."""
    sizes: dict[tuple[int, int], int] = {}
    for path in directory.glob("*"):
        try:
            stat = path.stat()
        except FileNotFoundError:
            continue  # rotated away between the listing and the stat
        sizes[(stat.st_dev, stat.st_ino)] = stat.st_size
    return sum(sizes.values())


def test_a_pod_writing_a_gib_of_log_is_bounded_on_disk_and_in_the_api_server(localkube):
    core = localkube.core_v1()
    info = json.loads((Path(localkube.state_dir) / "localkube.json").read_text())
    pids = {"apiserver": info["pids"]["apiserver"], **info["pids"]["kubelets"]}
    rss_before = {name: read_rss(pid) for name, pid in pids.items()}
    pod = core.create_namespaced_pod(
        "default",
        {
            "metadata": {"name": "loud"},
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {"name": "main", "image": "python:3.11", "command": ["python3", "-c", WRITER]}
                ],
            },
        },
    )
    log_dir = Path(localkube.state_dir) / "kubelet" / "pods" / pod.metadata.uid / "logs" / "main"
    query = urllib.parse.urlencode({"tailLines": 5, "limitBytes": 256 * 1024})
    log_path = f"/api/v1/namespaces/default/pods/loud/log?{query}"

    health_conn, log_conn = connect(localkube), connect(localkube)
    served: list[int] = []  # bytes of each pods/log answer

    def check_health() -> None:
        health_conn.request("GET", "/healthz")
        response = health_conn.getresponse()
        assert response.status == 200 and response.read() == b"ok"

    def poll_log() -> None:
        log_conn.request("GET", log_path, headers=localkube.auth_headers())
        response = log_conn.getresponse()
        body = response.read()
        if response.status == 400 and b"waiting to start" in body:
            return  # before the container runs
        assert response.status == 200 and len(body) <= 256 * 1024, (response.status, body[:200])
        served.append(len(body))

    health, logs = Poller(check_health, 0.02), Poller(poll_log, 0.02)
    peak_disk, peak_rss = 0, dict(rss_before)
    started = time.monotonic()
    health.start()
    logs.start()
    try:
        while True:
            phase = core.read_namespaced_pod("loud", "default").status.phase
            peak_disk = max(peak_disk, log_dir_bytes(log_dir))
            for name, pid in pids.items():
                peak_rss[name] = max(peak_rss[name], read_rss(pid))
            if phase in ("Succeeded", "Failed"):
                break
            assert time.monotonic() - started < 300, "the pod did not finish within 300 s"
            time.sleep(0.05)
    finally:
        health.stop.set()
        logs.stop.set()
        health.join()
        logs.join()
    elapsed = time.monotonic() - started
    assert phase == "Succeeded"
    tail = core.read_namespaced_pod_log("loud", "default", tail_lines=1, _preload_content=False)
    assert tail.data == b"end\n"
    print(
        f"1 GiB of log in {elapsed:.1f} s; peak on disk {peak_disk / MIB:.1f} MiB; "
        f"/healthz p95 {health.p95() * 1000:.1f} ms over "
        f"{len(health.durations)} calls; {len(logs.durations)} pods/log reads; RSS growth "
        + ", ".join(f"{n} {(peak_rss[n] - rss_before[n]) / MIB:.1f} MiB" for n in pids)
    )
    assert not health.errors and not logs.errors, (health.errors + logs.errors)[:3]
    assert peak_disk <= DISK_CAP
    assert log_dir_bytes(log_dir) <= DISK_CAP
    assert health.p95() < HEALTH_P95_S
    for name in pids:
        assert peak_rss[name] - rss_before[name] <= RSS_GROWTH_LIMIT, name
    assert len(served) > 10 and max(served) == 256 * 1024  # tails of 1 MiB lines, cut
