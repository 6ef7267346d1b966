"""bench/airflow_runs.py reads every page of a REST listing: Airflow cuts `limit` to 100."""

from urllib.parse import parse_qs, urlsplit

from bench import airflow_runs  # noqa: E402


class PagedAirflow:
    """Answers like Airflow's REST API: at most 100 items per page, whatever `limit` asks."""

    def __init__(self, total: int) -> None:
        self.items = [{"dag_run_id": f"run-{i}", "task_id": "train"} for i in range(total)]
        self.asked: list[str] = []

    def request(self, method: str, path: str) -> dict:
        self.asked.append(path)
        query = parse_qs(urlsplit(path).query)
        limit = min(int(query.get("limit", ["50"])[0]), 100)
        offset = int(query.get("offset", ["0"])[0])
        page = self.items[offset : offset + limit]
        return {"task_instances": page, "dag_runs": page, "total_entries": len(self.items)}


def test_task_instances_of_many_runs_are_read_page_by_page():
    airflow = PagedAirflow(250)
    found = airflow_runs.read_task_instances(airflow, "~", "tfjob_submit__test")
    assert [ti["dag_run_id"] for ti in found] == [f"run-{i}" for i in range(250)]
    assert len(airflow.asked) == 3
    assert all(
        p.startswith("/api/v2/dags/tfjob_submit__test/dagRuns/~/taskInstances?")
        for p in airflow.asked
    )


def test_an_empty_listing_is_one_request():
    airflow = PagedAirflow(0)
    assert airflow_runs.read_dag_runs(airflow, "tfjob_submit__test") == []
    assert len(airflow.asked) == 1
