"""The TFJob tab serves a run only while its recorded tenant is its DAG's tenant (issue 27)."""

from __future__ import annotations

import pytest
from fastapi import HTTPException

from runview.db import check_run_tenant
from tfjob.records.run import PartialRunDescription

DAG = "tfjob__digits-single"
RUN = "manual__1"


def described(tenant: object) -> PartialRunDescription:
    return PartialRunDescription.from_payload(
        {"request": {"name": "digits-single", "tenant": tenant}, "dag_id": DAG, "run_id": RUN}
    )


def test_a_run_recorded_for_the_dags_tenant_is_served():
    check_run_tenant(DAG, RUN, "demo", described("demo"))


def test_a_run_without_a_description_has_nothing_recorded_to_refuse():
    check_run_tenant(DAG, RUN, "demo", None)


@pytest.mark.parametrize(
    ("dag_tenant", "recorded", "words"),
    [
        (
            "research",
            "demo",
            "recorded for tenant 'demo', but the DAG belongs to tenant 'research'",
        ),
        (None, "demo", "recorded for tenant 'demo', but the DAG belongs to no tenant"),
        ("demo", None, "recorded for tenant None"),
        ("demo", ["demo"], "recorded for tenant None"),
    ],
)
def test_a_run_recorded_for_another_tenant_is_refused_naming_both(dag_tenant, recorded, words):
    with pytest.raises(HTTPException) as refused:
        check_run_tenant(DAG, RUN, dag_tenant, described(recorded))
    assert refused.value.status_code == 403
    assert words in refused.value.detail
    assert f"run {RUN!r} of DAG {DAG!r}" in refused.value.detail


def test_a_description_without_a_request_is_refused():
    with pytest.raises(HTTPException) as refused:
        check_run_tenant(
            DAG, RUN, "demo", PartialRunDescription.from_payload({"run_prefix": "s3://b/x"})
        )
    assert refused.value.status_code == 403
