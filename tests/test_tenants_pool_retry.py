"""A busy SQLite-backed Airflow answers 500 to a pool call; tshell tenants apply asks again."""

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from operators.tenancy import PoolApiError, PoolSpec, RestPoolClient


def serve(answers: list[int]) -> tuple[HTTPServer, list[str]]:
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            self.rfile.read(int(self.headers["Content-Length"]))
            seen.append(self.path)
            code = answers.pop(0)
            body = json.dumps({"detail": "Database error"} if code >= 500 else {}).encode()
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, seen


def test_a_pool_call_answered_500_is_repeated_until_it_succeeds():
    server, seen = serve([500, 500, 201])
    try:
        client = RestPoolClient(f"http://127.0.0.1:{server.server_port}", lambda: "token")
        client.create_pool(PoolSpec("tfjob-tenant-demo", 4, "demo"))
    finally:
        server.shutdown()
    assert seen == ["/api/v2/pools"] * 3


def test_a_refused_pool_call_is_not_repeated():
    server, seen = serve([400])
    try:
        client = RestPoolClient(f"http://127.0.0.1:{server.server_port}", lambda: "token")
        with pytest.raises(PoolApiError, match="HTTP 400"):
            client.create_pool(PoolSpec("tfjob-tenant-demo", 4, "demo"))
    finally:
        server.shutdown()
    assert seen == ["/api/v2/pools"]
