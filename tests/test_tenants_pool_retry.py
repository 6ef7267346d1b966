"""A busy Airflow answers a pool call with 500 or not in time; the client asks again."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from operators.tenancy import PoolApiError, PoolSpec, RestPoolClient

SLOW = 0  # an answer that comes after the client stopped waiting


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
            body = json.dumps({"detail": "Database error"} if code >= 500 else {}).encode()
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


def test_a_pool_call_answered_500_is_repeated_until_it_succeeds():
    server, seen = serve([500, 500, 201])
    try:
        client = RestPoolClient(f"http://127.0.0.1:{server.server_port}", lambda: "token")
        client.create_pool(PoolSpec("tfjob-tenant-demo", 4, "demo"))
    finally:
        server.shutdown()
    assert seen == ["POST /api/v2/pools"] * 3


def test_a_create_that_timed_out_and_then_meets_the_pool_updates_it_instead():
    server, seen = serve([SLOW, 409, 200])
    try:
        client = RestPoolClient(f"http://127.0.0.1:{server.server_port}", lambda: "token",
                                timeout=0.5)
        client.create_pool(PoolSpec("tfjob-tenant-demo", 4, "demo"))
    finally:
        server.shutdown()
    assert seen[:2] == ["POST /api/v2/pools"] * 2
    assert seen[2].startswith("PATCH /api/v2/pools/tfjob-tenant-demo?update_mask=slots")


def test_a_refused_pool_call_is_not_repeated():
    server, seen = serve([400])
    try:
        client = RestPoolClient(f"http://127.0.0.1:{server.server_port}", lambda: "token")
        with pytest.raises(PoolApiError, match="HTTP 400"):
            client.create_pool(PoolSpec("tfjob-tenant-demo", 4, "demo"))
    finally:
        server.shutdown()
    assert seen == ["POST /api/v2/pools"]
