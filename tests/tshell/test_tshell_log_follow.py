"""`tshell logs --follow` prints each log entry once, whatever Airflow's continuation token does.

A fake Airflow session (no server) replays what was seen in CI: the second read's
position lands before an entry the first read already returned.
"""

from __future__ import annotations

from typing import Any

from tshell.runs.logs import iter_live_log
from tshell.runs.lookup import RunRef


def entry(second: int, text: str) -> dict[str, str]:
    return {"timestamp": f"2026-12-03T10:00:{second:02d}.000001Z", "event": text}


class ReplayedSession:
    """Answers the task list and one log chunk per read, in order."""

    def __init__(self, chunks: list[list[Any]]) -> None:
        self.chunks = chunks
        self.reads = 0

    def get_json(self, path: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        if path.endswith("/taskInstances"):
            state = "running" if self.reads < len(self.chunks) - 1 else "success"
            return {"task_instances": [{"task_id": "train", "try_number": 1, "state": state}]}
        chunk = self.chunks[self.reads]
        self.reads += 1
        return {"content": chunk, "continuation_token": f"t{self.reads}"}


def test_an_entry_a_shifted_token_returns_again_is_printed_once() -> None:
    session = ReplayedSession(
        [
            [entry(0, "step 0"), entry(1, "step 1")],
            [entry(1, "step 1"), entry(2, "still training")],  # the position moved back
            [entry(2, "still training"), entry(3, "still training"), entry(4, "training done")],
        ]
    )
    lines = list(iter_live_log(session, RunRef("d", "r"), "train", True, 0.0))  # type: ignore[arg-type]
    assert lines == ["step 0", "step 1", "still training", "still training", "training done"]


def test_equal_texts_at_different_times_are_all_printed() -> None:
    session = ReplayedSession([[entry(0, "tick"), entry(1, "tick")], [entry(2, "tick")]])
    lines = list(iter_live_log(session, RunRef("d", "r"), "train", True, 0.0))  # type: ignore[arg-type]
    assert lines == ["tick", "tick", "tick"]
