"""Bounded reads of a container's log through the Kubernetes API.

A replica's log is written by an untrusted program and may be gigabytes long;
reading it whole would load the API server, Airflow's worker or API server,
and their memory. Every read here asks the API for a bounded answer
(`limitBytes`, and `tailLines` where the end is meant) and also stops reading
at the bound itself, since a server may ignore `limitBytes`:

- `read_log_head`: the first bytes of a log, and whether it goes on;
- `read_newest_lines`: the last lines of a log within a byte budget;
- `copy_log`: the first bytes of a log copied into a file piece by piece, so
  archiving a large log never holds it in memory.

A pod or container with no log (yet) reads as empty, as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

COPY_PIECE_BYTES = 1024 * 1024
# When the last N lines overflow the byte budget, ask again for N // this many.
NARROWING_FACTOR = 10


@dataclass(frozen=True)
class LogRead:
    """What a bounded read got: `data`, and whether the log goes on past it."""

    data: bytes
    truncated: bool


def iter_log_pieces(
    api: k8s.CoreV1Api,
    namespace: str,
    pod: str,
    container: str,
    max_bytes: int,
    tail_lines: int | None = None,
) -> Iterator[bytes]:
    """The log's first `max_bytes + 1` bytes at most (one more says it goes on), in pieces."""
    kwargs: dict[str, object] = {"container": container, "limit_bytes": max_bytes + 1}
    if tail_lines is not None:
        kwargs["tail_lines"] = tail_lines
    try:
        response = api.read_namespaced_pod_log(pod, namespace, _preload_content=False, **kwargs)
    except ApiException as exc:
        if exc.status in (400, 404):  # no such pod, or its container has not started
            return
        raise
    left = max_bytes + 1
    try:
        while left > 0:
            piece = response.read(min(COPY_PIECE_BYTES, left))
            if not piece:
                break
            left -= len(piece)
            yield piece
    finally:
        # Closed, not given back to the pool: an answer not read to its end would
        # leave its rest on the connection for the next request to trip over.
        response.close()


def read_log_head(
    api: k8s.CoreV1Api, namespace: str, pod: str, container: str, max_bytes: int
) -> LogRead:
    """The first `max_bytes` of the container's log."""
    data = b"".join(iter_log_pieces(api, namespace, pod, container, max_bytes))
    return LogRead(data[:max_bytes], len(data) > max_bytes)


def read_newest_lines(
    api: k8s.CoreV1Api, namespace: str, pod: str, container: str, lines: int, max_bytes: int
) -> str:
    """The log's last `lines` lines, or fewer of them when they exceed `max_bytes`.

    `limitBytes` keeps the first bytes of the `tailLines` answer, which would
    drop the newest lines; so an answer over the budget is asked again for a
    tenth of the lines (at most a few reads), and a last line longer than the
    budget comes back cut to its first `max_bytes`.
    """
    while True:
        data = b"".join(
            iter_log_pieces(api, namespace, pod, container, max_bytes, tail_lines=lines)
        )
        if len(data) <= max_bytes or lines <= 1:
            return data[:max_bytes].decode("utf-8", errors="replace")
        lines = max(1, lines // NARROWING_FACTOR)


def copy_log(
    api: k8s.CoreV1Api, namespace: str, pod: str, container: str, out: IO[bytes], max_bytes: int
) -> tuple[int, bool]:
    """Write the log's first `max_bytes` into `out`; (bytes written, whether the log goes on)."""
    written = 0
    for piece in iter_log_pieces(api, namespace, pod, container, max_bytes):
        kept = piece[: max_bytes - written]
        out.write(kept)
        written += len(kept)
        if len(kept) < len(piece):
            return written, True
    return written, False
