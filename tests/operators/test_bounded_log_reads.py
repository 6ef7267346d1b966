"""The product reads replica logs in bounded pieces (issue 27 item 3, the product's side).

A pod may write gigabytes of log. Every read asks Kubernetes for a bounded
answer (`limitBytes`, `tailLines` where the end is meant) and stops at the
bound itself when a server ignores it; `train` copies at most its cap into the
task log, `archive` keeps at most its cap per replica with a line saying where
it cut, streamed to S3 through a temporary file. Fakes only: the API answers
as kube-apiserver does (tailLines first, then limitBytes from that start).
"""

from __future__ import annotations

import io
import logging
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from urllib3.response import HTTPResponse

from operators import archive, logreads, train
from operators.logreads import copy_log, read_log_head, read_newest_lines
from operators.podlogs import describe_cut_line
from operators.settings import LOG_LINE_MAX_BYTES
from operators.train import TrainingWaitOperator
from operators.triggers import TrainingEvent, TrainingState
from tfjob.records.replicas import PodPhase, ReplicaStatus
from tfjob.request.model import Role
from tfjob.runlayout import S3Path


class CountingBody(io.BytesIO):
    """A response body that remembers how far it was read."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.most_read = 0

    def read(self, size: int | None = -1) -> bytes:
        data = super().read(size)
        self.most_read = max(self.most_read, self.tell())
        return data


class FakeLogApi:
    """`read_namespaced_pod_log` as kube-apiserver answers it, recording every ask."""

    def __init__(self, logs: dict[tuple[str, str], bytes], honour_limit: bool = True) -> None:
        self.logs = logs
        self.honour_limit = honour_limit
        self.asked: list[dict[str, Any]] = []
        self.bodies: list[CountingBody] = []

    def read_namespaced_pod_log(self, pod: str, namespace: str, **kwargs: Any) -> Any:
        self.asked.append({k: v for k, v in kwargs.items() if k != "_preload_content"})
        key = (pod, kwargs["container"])
        if key not in self.logs:
            raise ApiException(status=400, reason="container not started")
        data = self.logs[key]
        if kwargs.get("tail_lines") is not None:
            lines = data.splitlines(keepends=True)
            data = b"".join(lines[-kwargs["tail_lines"] :])
        if self.honour_limit and kwargs.get("limit_bytes") is not None:
            data = data[: kwargs["limit_bytes"]]
        body = CountingBody(data)
        self.bodies.append(body)
        return HTTPResponse(body=body, preload_content=False)


# --- the reads ------------------------------------------------------------------------------


def test_a_head_read_asks_for_one_byte_more_than_it_keeps_and_says_the_log_goes_on():
    api = FakeLogApi({("p", "tensorflow"): b"0123456789"})
    assert read_log_head(api, "ns", "p", "tensorflow", 4) == logreads.LogRead(b"0123", True)
    assert api.asked[-1]["limit_bytes"] == 5
    assert read_log_head(api, "ns", "p", "tensorflow", 10) == logreads.LogRead(b"0123456789", False)


def test_a_server_ignoring_limit_bytes_is_not_read_past_the_bound():
    api = FakeLogApi({("p", "tensorflow"): b"x" * (8 * 1024 * 1024)}, honour_limit=False)
    read = read_log_head(api, "ns", "p", "tensorflow", 1000)
    assert (len(read.data), read.truncated) == (1000, True)
    assert api.bodies[-1].most_read <= 1001 + 64 * 1024  # urllib3 may read ahead a little


def test_a_container_without_a_log_reads_as_empty():
    api = FakeLogApi({})
    assert read_log_head(api, "ns", "p", "fetch-bundle", 100) == logreads.LogRead(b"", False)
    assert read_newest_lines(api, "ns", "p", "tensorflow", 10, 100) == ""


def test_the_newest_lines_are_asked_with_tail_lines_and_limit_bytes():
    api = FakeLogApi({("p", "tensorflow"): b"".join(b"line %d\n" % i for i in range(100))})
    assert read_newest_lines(api, "ns", "p", "tensorflow", 3, 1024) == "line 97\nline 98\nline 99\n"
    assert api.asked == [{"container": "tensorflow", "tail_lines": 3, "limit_bytes": 1025}]


def test_newest_lines_over_the_budget_are_asked_again_for_fewer_so_the_end_is_kept():
    long_lines = b"".join(b"%04d " % i + b"y" * 95 + b"\n" for i in range(2000))  # 100 B each
    api = FakeLogApi({("p", "tensorflow"): long_lines})
    text = read_newest_lines(api, "ns", "p", "tensorflow", 2000, 5000)
    assert text.endswith("1999 " + "y" * 95 + "\n")
    assert len(text) <= 5000
    assert [a["tail_lines"] for a in api.asked] == [2000, 200, 20]


def test_a_last_line_longer_than_the_budget_comes_back_cut():
    api = FakeLogApi({("p", "tensorflow"): b"a\n" + b"z" * 10_000})
    assert read_newest_lines(api, "ns", "p", "tensorflow", 50, 100) == "z" * 100
    assert [a["tail_lines"] for a in api.asked] == [50, 5, 1]


def test_a_copy_writes_at_most_its_bound():
    api = FakeLogApi({("p", "tensorflow"): b"q" * 3_000_000})
    out = io.BytesIO()
    assert copy_log(api, "ns", "p", "tensorflow", out, 2_500_000) == (2_500_000, True)
    assert out.getvalue() == b"q" * 2_500_000


# --- archive --------------------------------------------------------------------------------


class FakeS3:
    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}

    def put_object(self, Bucket: str, Key: str, Body: Any, ContentType: str) -> None:  # noqa: N803
        self.objects[f"s3://{Bucket}/{Key}"] = Body.read()


def test_archive_keeps_its_cap_of_a_long_log_then_says_where_it_cut_and_keeps_the_end(
    monkeypatch,
):
    monkeypatch.setattr(archive, "ARCHIVE_LOG_MAX_BYTES", 1000)
    monkeypatch.setattr(archive, "SPOOL_IN_MEMORY_BYTES", 100)  # onto disk, as a large log goes
    main = b"".join(b"step %05d\n" % i for i in range(5000)) + b'TFJOB_METRICS {"a": 1}\n'
    api = FakeLogApi({("p", "fetch-bundle"): b"fetched\n", ("p", "tensorflow"): main})
    s3 = FakeS3()
    assert archive.archive_replica_log(api, s3, "ns", "p", S3Path("b", "run/logs/chief-0.log"))
    text = s3.objects["s3://b/run/logs/chief-0.log"].decode()
    head, cut, end = text.partition(archive.describe_cut_log(1000).decode())
    assert (
        head
        == "===== fetch-bundle =====\nfetched\n===== tensorflow =====\n"
        + main[:1000].decode()
        + "\n"
    )
    assert cut and end.endswith('step 04999\nTFJOB_METRICS {"a": 1}\n')
    main_reads = [a for a in api.asked if a["container"] == "tensorflow"]
    assert [(a["limit_bytes"], a.get("tail_lines")) for a in main_reads] == [
        (1001, None),
        (archive.LOG_TAIL_MAX_BYTES + 1, archive.LOG_END_LINES),
    ]


def test_archive_writes_a_short_log_whole_under_its_headers():
    api = FakeLogApi({("p", "fetch-bundle"): b"fetched", ("p", "tensorflow"): b"one\ntwo\n"})
    s3 = FakeS3()
    assert archive.archive_replica_log(api, s3, "ns", "p", S3Path("b", "k.log"))
    assert s3.objects["s3://b/k.log"] == (
        b"===== fetch-bundle =====\nfetched\n===== tensorflow =====\none\ntwo\n"
    )


def test_archive_writes_nothing_for_a_pod_without_any_log():
    s3 = FakeS3()
    assert not archive.archive_replica_log(FakeLogApi({}), s3, "ns", "p", S3Path("b", "k.log"))
    assert s3.objects == {}


# --- train ----------------------------------------------------------------------------------


class LineRecorder(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def read_train_logs(api: FakeLogApi, streamed: int = 0) -> Any:
    """(worker-0's LogEnd, the lines train wrote for it into its task log)."""
    event = TrainingEvent(
        TrainingState.FAILED,
        replicas=(ReplicaStatus(Role.WORKER, 0, "p", PodPhase.FAILED),),
        streamed={"worker-0": streamed},
    )
    operator = TrainingWaitOperator(task_id="train")
    recorder = LineRecorder()
    logger = logging.getLogger(f"test.train.{id(operator)}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    logger.addHandler(recorder)
    operator._cached_logger = logger
    ends = operator._read_logs(SimpleNamespace(namespace="ns"), api, event)
    return ends["worker-0"], [m for m in recorder.messages if m.startswith("[worker-0]")]


def test_train_copies_its_cap_and_reads_the_end_of_a_longer_log_for_metrics_and_failure(
    monkeypatch,
):
    monkeypatch.setattr(train, "TRAIN_LOG_MAX_BYTES", 100)
    log = b"".join(b"line %03d\n" % i for i in range(300)) + b'TFJOB_METRICS {"loss": 0.5}\nboom\n'
    api = FakeLogApi({("p", "tensorflow"): log})
    end, lines = read_train_logs(api, streamed=2)
    assert lines[0] == "[worker-0] line 002"  # the trigger logged the first two
    # 100 bytes hold lines 0-10 (9 bytes each) and the first byte of line 11
    assert lines[-3:-1] == ["[worker-0] line 010", "[worker-0] l"]
    assert "log cut here after 100 bytes" in lines[-1]
    assert end.metrics == {"loss": 0.5}
    assert end.tail.splitlines()[-1] == "boom"
    assert api.asked[0]["limit_bytes"] == 101


def test_train_cuts_a_huge_line_as_the_trigger_does():
    api = FakeLogApi({("p", "tensorflow"): b"a\n" + b"w" * (LOG_LINE_MAX_BYTES * 3) + b"\nb\n"})
    end, lines = read_train_logs(api)
    cut = describe_cut_line(LOG_LINE_MAX_BYTES).decode()
    assert lines == ["[worker-0] a", "[worker-0] " + "w" * LOG_LINE_MAX_BYTES + cut, "[worker-0] b"]
    assert end.metrics is None


@pytest.mark.parametrize("ignored", [False, True])
def test_no_log_read_of_train_or_archive_is_unbounded(ignored):
    api = FakeLogApi(
        {("p", "tensorflow"): b"x\n" * 10, ("p", "fetch-bundle"): b"y\n"}, honour_limit=not ignored
    )
    read_train_logs(api)
    archive.archive_replica_log(api, FakeS3(), "ns", "p", S3Path("b", "k.log"))
    assert api.asked and all("limit_bytes" in asked for asked in api.asked)
