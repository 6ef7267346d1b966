"""A pool call that gets no answer in time or 502/503/504 is asked again; a 500 or a
4xx is raised at once, with the server's detail."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tenancy.pools import PoolApiError, PoolSpec, PoolUnavailableError, RestPoolClient

SLOW = 0  # an answer that comes after the client stopped waiting
DETAILS = {
    500: 'relation "slot_pool" does not exist',
    502: "bad gateway",
    503: "upstream connect error",
    504: "upstream request timeout",
}


def serve(answers: list[int]) -> tuple[ThreadingHTTPServer, list[str]]:
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            self.rfile.read(int(self.headers["Content-Length"]))
            seen.append(f"{self.command} {self.path}")
            code = answers.pop(0)
            if code == SLOW:
                time.sleep(1.5)
                code = 201
            body = json.dumps({"detail": DETAILS[code]} if code in DETAILS else {}).encode()
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_PATCH = do_POST  # noqa: N815

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, seen


def test_a_pool_call_answered_503_or_502_is_repeated_until_it_succeeds():
    server, seen = serve([503, 502, 201])
    try:
        client = RestPoolClient(f"http://127.0.0.1:{server.server_port}", lambda: "token")
        client.create_pool(PoolSpec("tfjob-tenant-demo", 4, "demo"))
    finally:
        server.shutdown()
    assert seen == ["POST /api/v2/pools"] * 3


def test_a_pool_call_still_unavailable_after_every_try_says_so(monkeypatch):
    monkeypatch.setattr("tenancy.pools.POOL_REQUEST_ATTEMPTS", 2)
    server, seen = serve([504] * 2)
    try:
        client = RestPoolClient(f"http://127.0.0.1:{server.server_port}", lambda: "token")
        with pytest.raises(PoolUnavailableError, match="HTTP 504.*upstream request timeout"):
            client.update_pool(PoolSpec("tfjob-tenant-demo", 4, "demo"))
    finally:
        server.shutdown()
    assert len(seen) == 2


def test_a_create_that_timed_out_and_then_meets_the_pool_updates_it_instead():
    server, seen = serve([SLOW, 409, 200])
    try:
        client = RestPoolClient(
            f"http://127.0.0.1:{server.server_port}", lambda: "token", timeout=0.5
        )
        client.create_pool(PoolSpec("tfjob-tenant-demo", 4, "demo"))
    finally:
        server.shutdown()
    assert seen[:2] == ["POST /api/v2/pools"] * 2
    assert seen[2].startswith("PATCH /api/v2/pools/tfjob-tenant-demo?update_mask=slots")


def test_a_pool_call_answered_500_is_not_repeated_and_shows_the_detail():
    server, seen = serve([500, 201])
    try:
        client = RestPoolClient(f"http://127.0.0.1:{server.server_port}", lambda: "token")
        with pytest.raises(PoolApiError, match='HTTP 500.*relation \\\\"slot_pool\\\\"') as raised:
            client.create_pool(PoolSpec("tfjob-tenant-demo", 4, "demo"))
    finally:
        server.shutdown()
    assert not isinstance(raised.value, PoolUnavailableError)
    assert seen == ["POST /api/v2/pools"]


def test_a_refused_pool_call_is_not_repeated():
    server, seen = serve([400])
    try:
        client = RestPoolClient(f"http://127.0.0.1:{server.server_port}", lambda: "token")
        with pytest.raises(PoolApiError, match="HTTP 400"):
            client.create_pool(PoolSpec("tfjob-tenant-demo", 4, "demo"))
    finally:
        server.shutdown()
    assert seen == ["POST /api/v2/pools"]
