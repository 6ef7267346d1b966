"""Airflow's S3 calls ride out a short S3 outage: back-off, a budget, every retry logged."""

from __future__ import annotations

import logging

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from operators import archive
from operators.s3retry import S3Unavailable, call_with_s3_retries, is_transient_s3_error
from tfjob.runlayout import S3Path


def server_error(code: str = "InternalError", status: int = 500) -> ClientError:
    return ClientError(
        {
            "Error": {"Code": code, "Message": "We encountered an internal error"},
            "ResponseMetadata": {"HTTPStatusCode": status},
        },
        "PutObject",
    )


def refusal(code: str = "AccessDenied", status: int = 403) -> ClientError:
    return ClientError(
        {
            "Error": {"Code": code, "Message": "Access Denied"},
            "ResponseMetadata": {"HTTPStatusCode": status},
        },
        "PutObject",
    )


class FakeClock:
    """Time that moves only when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class FlakyS3:
    """A client whose put_object fails `failures` times, then works."""

    def __init__(self, failures: int, error: Exception | None = None) -> None:
        self.failures = failures
        self.error = error or EndpointConnectionError(endpoint_url="http://127.0.0.1:9000")
        self.calls = 0
        self.stored: dict[tuple[str, str], bytes] = {}

    def put_object(self, Bucket: str, Key: str, Body: bytes, **kwargs: object) -> dict:  # noqa: N803
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        self.stored[(Bucket, Key)] = Body
        return {}


def test_a_call_that_fails_three_times_succeeds_on_the_fourth_after_doubling_waits(caplog):
    s3, clock = FlakyS3(failures=3), FakeClock()
    caplog.set_level(logging.WARNING, logger="airflow.task")
    call_with_s3_retries(
        lambda: s3.put_object(Bucket="b", Key="k", Body=b"x"),
        "put s3://b/k",
        first_delay_s=1,
        max_delay_s=20,
        budget_s=120,
        sleep=clock.sleep,
        clock=clock,
    )
    assert s3.calls == 4 and s3.stored == {("b", "k"): b"x"}
    assert clock.sleeps == [1, 2, 4]
    retries = [r.getMessage() for r in caplog.records if "put s3://b/k failed" in r.getMessage()]
    assert len(retries) == 3
    assert "EndpointConnectionError" in retries[0] and "attempt 1, retrying in 1.0s" in retries[0]


def test_waits_stop_growing_at_the_largest_delay_and_the_budget_bounds_the_total():
    s3, clock = FlakyS3(failures=1000, error=server_error("SlowDown", 503)), FakeClock()
    with pytest.raises(S3Unavailable) as failed:
        call_with_s3_retries(
            lambda: s3.put_object(Bucket="b", Key="k", Body=b"x"),
            "put s3://b/k",
            first_delay_s=1,
            max_delay_s=20,
            budget_s=120,
            sleep=clock.sleep,
            clock=clock,
        )
    assert max(clock.sleeps) == 20
    assert clock.sleeps[:6] == [1, 2, 4, 8, 16, 20]
    assert sum(clock.sleeps) == pytest.approx(120)  # the last wait ends at the budget
    assert "put s3://b/k: S3 still failing after" in str(failed.value)
    assert "SlowDown" in str(failed.value) and "retry budget 120s" in str(failed.value)
    assert isinstance(failed.value.__cause__, ClientError)


def test_a_refusal_is_raised_at_once_and_unchanged():
    s3, clock = FlakyS3(failures=5, error=refusal()), FakeClock()
    with pytest.raises(ClientError, match="AccessDenied"):
        call_with_s3_retries(
            lambda: s3.put_object(Bucket="b", Key="k", Body=b"x"),
            "put",
            sleep=clock.sleep,
            clock=clock,
        )
    assert s3.calls == 1 and clock.sleeps == []


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (EndpointConnectionError(endpoint_url="http://s3"), True),
        (server_error("InternalError", 500), True),
        (server_error("ServiceUnavailable", 503), True),
        (server_error("SlowDown", 503), True),
        (server_error("Whatever", 502), True),
        (refusal("AccessDenied", 403), False),
        (refusal("NoSuchKey", 404), False),
        (refusal("NoSuchBucket", 404), False),
        (ValueError("not S3"), False),
    ],
)
def test_only_errors_that_waiting_can_cure_are_transient(error, transient):
    assert is_transient_s3_error(error) is transient


def test_archive_puts_ride_out_an_outage(monkeypatch):
    """archive's own helper (used for logs, run.json and `latest`) goes through the retries."""
    s3, clock = FlakyS3(failures=2), FakeClock()
    monkeypatch.setattr("runtime.backoff.time.sleep", clock.sleep)
    archive.put_text(s3, S3Path("b", "runs/r/run.json"), "{}", "application/json")
    assert s3.calls == 3 and s3.stored == {("b", "runs/r/run.json"): b"{}"}
