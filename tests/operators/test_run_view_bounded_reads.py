"""The TFJob tab reads logs in bounded pieces and computes a run's curves once for every tab
(issue 27 item 3): archived curves are read from S3 once per archive, live curves at most
once per 2 s, the log pane's reads are bounded in bytes. Fakes only (RunView's readers).
"""

from __future__ import annotations

import io
from typing import Any

from urllib3.response import HTTPResponse

from operators.podlogs import describe_cut_line
from operators.settings import LOG_LINE_MAX_BYTES, LOG_TAIL_MAX_BYTES
from runview import api as run_view_api
from runview.api import RunView
from runview.live import LiveReads
from runview.logs import (
    ARCHIVED_CURVES_TTL_S,
    MAX_LOG_BYTES,
    MAX_PANE_LOG_BYTES,
    select_log_lines,
)

DAG, RUN = "tfjob_submit__team-a", "manual__1"
NAMESPACE, RUN_KEY = "tfjob-team-a", "digits-1234abcd"
POINT = 'TFJOB_METRIC {"step": %d, "loss": 0.5}\n'


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class FakeStorage:
    """The archived logs, counting each ranged read."""

    def __init__(self, logs: dict[str, str]) -> None:
        self.logs = logs
        self.reads: list[tuple[str, int]] = []

    def read_tail(self, _s3: Any, _storage: Any, path: str, max_bytes: int) -> str:
        self.reads.append((path, max_bytes))
        return self.logs[path][-max_bytes:]


def archived_summary(archive_try: int = 1) -> dict[str, Any]:
    return {
        "dag_id": DAG,
        "run_id": RUN,
        "active": False,
        "job": {"namespace": NAMESPACE, "run_key": RUN_KEY},
        "logs": [f"s3://b/runs/{RUN_KEY}/logs/chief-0.log", f"s3://b/runs/{RUN_KEY}/logs/ps-0.log"],
        "tasks": [{"task_id": "archive", "try_number": archive_try, "end": f"t{archive_try}"}],
    }


def a_view(monkeypatch, storage: FakeStorage, clock: FakeClock) -> RunView:
    monkeypatch.setattr(run_view_api, "read_run_storage", lambda *args: "storage")
    monkeypatch.setattr(run_view_api, "connect_run_storage", lambda storage: "s3")
    monkeypatch.setattr(run_view_api, "read_run_file_tail", storage.read_tail)
    return RunView(LiveReads(lambda *a: [], lambda *a: "", clock=clock))


def test_archived_curves_are_read_from_s3_once_for_many_requests(monkeypatch):
    storage = FakeStorage(
        {"logs/chief-0.log": "".join(POINT % i for i in range(3)), "logs/ps-0.log": "ps\n"}
    )
    clock = FakeClock()
    view = a_view(monkeypatch, storage, clock)
    answers = [view.answer_curves(None, archived_summary()) for _ in range(20)]
    assert answers[0]["source"] == "archive"
    assert [p["step"] for p in answers[0]["curves"]["chief-0"]] == [0, 1, 2]
    assert all(answer == answers[0] for answer in answers)
    assert storage.reads == [("logs/chief-0.log", MAX_LOG_BYTES), ("logs/ps-0.log", MAX_LOG_BYTES)]
    clock.now += ARCHIVED_CURVES_TTL_S - 1
    view.answer_curves(None, archived_summary())
    assert len(storage.reads) == 2


def test_a_new_archive_of_the_run_is_read_at_once(monkeypatch):
    storage = FakeStorage({"logs/chief-0.log": POINT % 1, "logs/ps-0.log": ""})
    view = a_view(monkeypatch, storage, FakeClock())
    view.answer_curves(None, archived_summary(archive_try=1))
    storage.logs["logs/chief-0.log"] = POINT % 1 + POINT % 2
    answer = view.answer_curves(None, archived_summary(archive_try=2))
    assert [p["step"] for p in answer["curves"]["chief-0"]] == [1, 2]
    assert len(storage.reads) == 4


def test_archived_curves_are_read_again_after_their_ttl(monkeypatch):
    storage = FakeStorage({"logs/chief-0.log": POINT % 1, "logs/ps-0.log": ""})
    clock = FakeClock()
    view = a_view(monkeypatch, storage, clock)
    view.answer_curves(None, archived_summary())
    clock.now += ARCHIVED_CURVES_TTL_S
    view.answer_curves(None, archived_summary())
    assert len(storage.reads) == 4


def test_the_log_pane_reads_a_bounded_end_of_an_archived_log(monkeypatch):
    storage = FakeStorage({"logs/chief-0.log": "a\n" * 10})
    view = a_view(monkeypatch, storage, FakeClock())
    assert view.read_log_text(None, archived_summary(), "chief-0") == ("archive", "a\n" * 10)
    assert storage.reads == [("logs/chief-0.log", MAX_PANE_LOG_BYTES)]


def test_live_curves_are_computed_once_per_ttl_for_every_tab(monkeypatch):
    clock = FakeClock()
    pods = [
        {
            "metadata": {
                "name": f"{RUN_KEY}-chief-0",
                "labels": {"tfjob.io/role": "chief", "tfjob.io/index": "0"},
            },
            "status": {"phase": "Running"},
        }
    ]
    log_reads = []

    def read_log(namespace: str, pod: str, tail: int) -> str:
        log_reads.append(pod)
        return POINT % len(log_reads)

    view = RunView(LiveReads(lambda *a: pods, read_log, clock=clock))
    computed = []
    real_collect = run_view_api.collect_curves
    monkeypatch.setattr(
        run_view_api, "collect_curves", lambda logs: computed.append(1) or real_collect(logs)
    )
    summary = dict(archived_summary(), active=True)
    answers = [view.answer_curves(None, summary) for _ in range(10)]
    assert answers[0]["source"] == "live" and len(computed) == 1 and len(log_reads) == 1
    clock.now += 2.0
    assert view.answer_curves(None, summary)["curves"]["chief-0"][0]["step"] == 2
    assert len(computed) == 2


def test_the_live_tail_asks_kubernetes_for_bounded_lines(monkeypatch):
    asked = []

    class Api:
        def read_namespaced_pod_log(self, pod, namespace, **kwargs):
            asked.append(kwargs)
            return HTTPResponse(body=io.BytesIO(b"x\ny\n"), preload_content=False)

    monkeypatch.setattr(run_view_api, "connect_kubernetes", lambda: Api())
    assert run_view_api.read_kubernetes_log(NAMESPACE, "pod", 2000) == "x\ny\n"
    assert asked[0]["tail_lines"] == 2000
    assert asked[0]["limit_bytes"] == LOG_TAIL_MAX_BYTES + 1


def test_a_huge_line_in_the_log_pane_is_cut():
    lines = select_log_lines("a\n" + "z" * (LOG_LINE_MAX_BYTES + 10) + "\nb\n", tail=10)
    assert lines == [
        "a",
        "z" * LOG_LINE_MAX_BYTES + describe_cut_line(LOG_LINE_MAX_BYTES).decode(),
        "b",
    ]
