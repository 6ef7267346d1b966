"""The transient-error rule: which Kubernetes API failures are waited out, and the back-off."""

from __future__ import annotations

import aiohttp
import pytest
import urllib3.exceptions
from kubernetes.client.exceptions import ApiException
from kubernetes_asyncio.client.exceptions import ApiException as AsyncApiException

from operators.transient import API_BACKOFF, call_with_retries, describe_api_error, is_transient


@pytest.mark.parametrize("status", [429, 500, 502, 503, 504])
def test_an_overloaded_or_unavailable_api_server_is_transient(status):
    assert is_transient(ApiException(status=status, reason="Service Unavailable"))
    assert is_transient(AsyncApiException(status=status))


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 410, 422])
def test_other_answers_are_final(status):
    assert not is_transient(ApiException(status=status))
    assert not is_transient(AsyncApiException(status=status))


@pytest.mark.parametrize(
    "error",
    [
        ConnectionResetError(104, "Connection reset by peer"),
        ConnectionRefusedError(111, "Connection refused"),
        TimeoutError("timed out"),
        urllib3.exceptions.ProtocolError("Connection aborted.", ConnectionResetError()),
        urllib3.exceptions.ReadTimeoutError(None, "/api/v1/pods", "Read timed out."),
        aiohttp.ServerDisconnectedError(),
        aiohttp.ClientPayloadError("Response payload is not completed"),
    ],
)
def test_dropped_connections_and_timeouts_are_transient(error):
    assert is_transient(error)


def test_an_exec_refused_at_its_handshake_is_judged_by_the_handshake_status():
    # kubernetes.stream reports a refused WebSocket upgrade as status 0 with the status in text
    busy = ApiException(status=0, reason="Handshake status 503 Service Unavailable -+-+- {}")
    gone = ApiException(status=0, reason="Handshake status 404 Not Found -+-+- {}")
    assert is_transient(busy) and not is_transient(gone)
    assert describe_api_error(busy) == "HTTP 503"


def test_a_programming_error_is_not_transient():
    assert not is_transient(ValueError("bad"))
    assert not is_transient(KeyError("metadata"))


def test_the_back_off_doubles_with_jitter_up_to_its_bound():
    lowest = API_BACKOFF.with_changes(draw=lambda: 0.0).schedule()
    highest = API_BACKOFF.with_changes(draw=lambda: 1.0).schedule()
    assert [lowest.next_delay() for _ in range(7)] == [0.25, 0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    assert [highest.next_delay() for _ in range(7)] == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    highest.reset()
    assert highest.next_delay() == 0.5


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


class QuietLog:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def warning(self, message: str, *args) -> None:
        self.lines.append(message % args)


def test_a_call_is_asked_again_after_transient_failures_until_it_answers():
    answers = [
        ApiException(status=503, reason="Service Unavailable"),
        ConnectionResetError(),
        ApiException(status=500, reason="Internal Server Error"),
        "pods",
    ]
    clock, log = FakeClock(), QuietLog()

    def call():
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert (
        call_with_retries(
            call,
            deadline=60.0,
            what="listing pods",
            log=log,
            policy=API_BACKOFF.with_changes(
                draw=lambda: 1.0, clock=lambda: clock.now, sleep=clock.sleep
            ),
        )
        == "pods"
    )
    assert clock.slept == [0.5, 1.0, 2.0]
    assert log.lines[0] == "listing pods: 503 Service Unavailable (transient); asking again in 0.5s"


def test_a_final_error_or_the_deadline_ends_the_retries():
    clock, log = FakeClock(), QuietLog()

    def forbidden():
        raise ApiException(status=403, reason="Forbidden")

    with pytest.raises(ApiException) as error:
        call_with_retries(
            forbidden,
            deadline=60.0,
            what="x",
            log=log,
            policy=API_BACKOFF.with_changes(clock=lambda: clock.now, sleep=clock.sleep),
        )
    assert error.value.status == 403 and clock.slept == []

    def unavailable():
        raise ApiException(status=503)

    with pytest.raises(ApiException):
        call_with_retries(
            unavailable,
            deadline=5.0,
            what="x",
            log=log,
            policy=API_BACKOFF.with_changes(
                draw=lambda: 1.0, clock=lambda: clock.now, sleep=clock.sleep
            ),
        )
    assert sum(clock.slept) == pytest.approx(5.0)  # the last pause ends at the deadline
