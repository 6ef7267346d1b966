"""The API server's S3 clients: one per tenant connection, shared for a minute, then made again
(runview/s3clients.py; fakes and a fake clock, no Airflow)."""

from __future__ import annotations

import threading

from runview import s3clients
from runview.s3clients import S3Clients


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make_counting() -> tuple[list[str], S3Clients, Clock]:
    made: list[str] = []
    clock = Clock()

    def make(conn_id: str) -> object:
        made.append(conn_id)
        return object()

    return made, S3Clients(make, ttl_s=60.0, clock=clock), clock  # type: ignore[arg-type]


def test_a_connection_gets_one_client_for_a_minute_then_a_new_one():
    made, clients, clock = make_counting()
    first = clients.connect("team_a_s3")
    clock.now += 59.9
    assert clients.connect("team_a_s3") is first
    clock.now += 0.1
    second = clients.connect("team_a_s3")
    assert second is not first and made == ["team_a_s3", "team_a_s3"]
    assert clients.connect("team_a_s3") is second


def test_each_connection_has_its_own_client():
    made, clients, _ = make_counting()
    a, b = clients.connect("team_a_s3"), clients.connect("team_b_s3")
    assert a is not b
    assert clients.connect("team_a_s3") is a and clients.connect("team_b_s3") is b
    assert made == ["team_a_s3", "team_b_s3"]


def test_a_failure_to_make_one_keeps_nothing_and_the_next_request_tries_again():
    calls = []

    def make(conn_id: str) -> object:
        calls.append(conn_id)
        if len(calls) == 1:
            raise RuntimeError("connection not found")
        return object()

    clients = S3Clients(make)  # type: ignore[arg-type]
    try:
        clients.connect("team_a_s3")
    except RuntimeError:
        pass
    else:
        raise AssertionError("the failure was swallowed")
    assert clients.connect("team_a_s3") is clients.connect("team_a_s3")
    assert calls == ["team_a_s3", "team_a_s3"]


def test_the_table_keeps_at_most_max_clients_dropping_the_oldest(monkeypatch):
    monkeypatch.setattr(s3clients, "MAX_CLIENTS", 3)
    made, clients, clock = make_counting()
    for name in ("a", "b", "c"):
        clients.connect(name)
        clock.now += 1
    clients.connect("d")  # "a" is the oldest: dropped
    assert len(clients._clients) == 3 and "a" not in clients._clients
    clients.connect("b")
    assert made == ["a", "b", "c", "d"]


def test_requests_at_once_share_clients_made_outside_the_lock():
    release = threading.Event()
    made = []

    def make(conn_id: str) -> object:
        made.append(conn_id)
        if conn_id == "slow":
            release.wait(10)
        return object()

    clients = S3Clients(make)  # type: ignore[arg-type]
    slow = threading.Thread(target=clients.connect, args=("slow",))
    slow.start()
    # A slow connection does not hold up another one's request.
    assert clients.connect("fast") is clients.connect("fast")
    release.set()
    slow.join(10)
    assert sorted(made) == ["fast", "slow"]
