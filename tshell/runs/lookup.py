"""Which TF-on-K8s runs a user may see, how `RUN` (and `--dag`) finds one, and what a 403 says.

Why this exists: tenants are kept apart by Airflow's authorization, not by
tshell. Each tenant has its own submit DAG (`tfjob_submit__<tenant>`), each
request file its DAG (`tfjob__<name>`); the user's Airflow roles grant some of
them, Airflow's lists hold only those, and anything else answers 403. This
module is the one place that knows which DAGs are TF-on-K8s's (tfjob.naming's
prefixes), finds runs among them, and turns a 403 into a sentence naming the
user, what was refused and the DAG.

Airflow's `*_prefix_pattern` filters drop a term's trailing non-alphanumeric
characters (`tfjob__` matches `tfjob_janitor` too; `_PrefixPatternParam` in
airflow/api_fastapi/common/parameters.py), so the server narrows and the exact
prefixes here decide. tfjob.naming imports the request model (a third of a
second), so it is imported when a lookup runs, not with `tshell --help`.
"""

from __future__ import annotations

import contextlib
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass

from tfjob.jsontypes import JsonObject
from tfjob.pipeline_ids import REQUEST_DAG_PREFIX, SUBMIT_DAG_PREFIX, tenant_of_tags
from tshell.airflow_client import (
    AirflowClientError,
    AirflowForbiddenError,
    AirflowNotFoundError,
    AirflowSession,
)
from tshell.exitcodes import CommandError, ExitCode

# Airflow's largest page (api.maximum_page_limit defaults to 100).
PAGE_LIMIT = 100


@dataclass(frozen=True)
class RunRef:
    dag_id: str
    run_id: str

    @property
    def path(self) -> str:
        return f"/api/v2/dags/{quote(self.dag_id)}/dagRuns/{quote(self.run_id)}"


def quote(value: str) -> str:
    return urllib.parse.quote(value, safe="")


def run_ui_url(session: AirflowSession, ref: RunRef) -> str:
    return f"{session.url}/dags/{quote(ref.dag_id)}/runs/{quote(ref.run_id)}"


def list_training_dag_prefixes() -> tuple[str, ...]:
    """The dag_id prefixes of TF-on-K8s's DAGs: the tenants' submit DAGs and request files'."""
    return (SUBMIT_DAG_PREFIX, REQUEST_DAG_PREFIX)


def is_training_dag_id(dag_id: str) -> bool:
    return dag_id.startswith(list_training_dag_prefixes())


@contextlib.contextmanager
def explain_forbidden(session: AirflowSession, deed: str, target: str) -> Iterator[None]:
    """A 403 in the block: `user <u> may not <deed> (Airflow answered 403 for <target>)`."""
    try:
        yield
    except AirflowForbiddenError:
        raise CommandError(
            f"user {session.config.username} may not {deed} (Airflow answered 403 for {target})",
            ExitCode.AIRFLOW_ERROR,
        ) from None


def explain_forbidden_on_run(
    session: AirflowSession, deed: str, ref: RunRef
) -> contextlib.AbstractContextManager[None]:
    """`explain_forbidden` for a deed ("read", "cancel") on one run."""
    return explain_forbidden(
        session, f"{deed} run {ref.run_id} of DAG {ref.dag_id}", f"DAG {ref.dag_id}"
    )


def find_run(
    session: AirflowSession, run_id: str, dag_id: str | None = None, deed: str = "read"
) -> JsonObject:
    """The DAG run `run_id` of `dag_id`, or of whichever TF-on-K8s DAG the user may read has it.

    `deed` ("read", "cancel") is what a 403 says the user may not do.
    """
    if dag_id:
        ref = RunRef(dag_id, run_id)
        with explain_forbidden_on_run(session, deed, ref):
            try:
                return session.get_json(ref.path)
            except AirflowNotFoundError:
                raise CommandError(
                    f"unknown run {run_id!r} of DAG {dag_id!r}; `tshell list` shows the runs",
                    ExitCode.NOT_FOUND,
                ) from None
    params = {
        "run_id_prefix_pattern": run_id,
        "dag_id_prefix_pattern": "|".join(list_training_dag_prefixes()),
        "limit": PAGE_LIMIT,
    }
    with explain_forbidden(session, f"read runs on {session.url}", "the runs of every DAG"):
        page = session.get_json("/api/v2/dags/~/dagRuns", params)
    matches = [
        run
        for run in page["dag_runs"]
        if run["dag_run_id"] == run_id and is_training_dag_id(run["dag_id"])
    ]
    if not matches:
        raise CommandError(
            f"unknown run {run_id!r}: no TF-on-K8s DAG that user {session.config.username!r} "
            f"may read on {session.url} has it; `tshell list` shows the runs",
            ExitCode.NOT_FOUND,
        )
    if len(matches) > 1:
        dags = ", ".join(sorted(run["dag_id"] for run in matches))
        raise CommandError(
            f"run {run_id!r} exists in several DAGs ({dags}); choose one with --dag",
            ExitCode.NOT_FOUND,
        )
    return matches[0]


def list_training_dags(session: AirflowSession) -> dict[str, str | None]:
    """Every TF-on-K8s DAG the user may read, stale ones included (their runs remain), with
    the tenant its `tenant:<name>` tag names (None when it names none)."""
    dags: dict[str, str | None] = {}
    params: JsonObject = {
        "dag_id_prefix_pattern": "|".join(list_training_dag_prefixes()),
        "exclude_stale": "false",
        "limit": PAGE_LIMIT,
        "offset": 0,
    }
    while True:
        page = session.get_json("/api/v2/dags", params)
        for dag in page["dags"]:
            if is_training_dag_id(dag["dag_id"]):
                tags = (tag.get("name", "") for tag in dag.get("tags") or [])
                dags[dag["dag_id"]] = tenant_of_tags(tags)
        params["offset"] += len(page["dags"])
        if not page["dags"] or params["offset"] >= page["total_entries"]:
            return dags


def read_dag_tenant(session: AirflowSession, dag_id: str) -> str | None:
    """The tenant one DAG's tags name; None when they name none or the DAG cannot be read."""
    try:
        dag = session.get_json(f"/api/v2/dags/{quote(dag_id)}")
    except AirflowClientError:  # the runs were readable: a missing tenant is no reason to fail
        return None
    return tenant_of_tags(tag.get("name", "") for tag in dag.get("tags") or [])


def list_training_runs(
    session: AirflowSession, dag_id: str | None, state: str | None, limit: int
) -> tuple[list[JsonObject], dict[str, str | None]]:
    """The newest `limit` runs of `dag_id`, or of every TF-on-K8s DAG the user may read, and
    the tenant of each DAG they belong to (from the DAGs' tags)."""
    if dag_id:
        params: JsonObject = {"limit": limit, "order_by": "-run_after"}
        if state:
            params["state"] = state
        with explain_forbidden(session, f"list the runs of DAG {dag_id}", f"DAG {dag_id}"):
            runs = session.get_json(f"/api/v2/dags/{quote(dag_id)}/dagRuns", params)["dag_runs"]
        return runs, {dag_id: read_dag_tenant(session, dag_id)}
    with explain_forbidden(session, f"list DAGs on {session.url}", "the list of DAGs"):
        dags = list_training_dags(session)
        if not dags:
            return [], {}
        # One call for all of them: the batch read takes a list of dag_ids, the GET does not.
        body: JsonObject = {
            "dag_ids": list(dags),
            "order_by": "-run_after",
            "page_limit": limit,
        }
        if state:
            body["states"] = [state]
        return session.post_json("/api/v2/dags/~/dagRuns/list", body)["dag_runs"], dags
