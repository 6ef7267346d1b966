"""The chaos soak's pure parts (issue 30): its seeded plan, each invariant check, its report.

No world: the checks run on synthetic observations, good ones (no violation) and bad ones
(a violation naming the run).
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from bench import report_chaos
from bench.chaos_invariants import (
    Check,
    RunSeen,
    SoakSeen,
    check_soak,
    find_secrets,
    standin_model_sha256,
)
from bench.chaos_observe import scan_chunks
from bench.chaos_plan import (
    POD_FAULTS,
    POD_PHASES,
    TENANTS,
    FaultKind,
    Phase,
    build_fault_plan,
    build_run_plan,
    read_phase,
)
from bench.chaos_world import build_request
from harness.repo_root import REPO_ROOT
from tfjob.request.model import validate_request
from tfjob.tenants import load_tenants
from tfjob.tenants.policy import check_request_policy

OUTPUT = "s3://tfjob-test/outputs/chaos-1-01"
CHIEF_SHA = standin_model_sha256("worker-0")


def good_run(**changes: object) -> RunSeen:
    run = RunSeen(
        name="chaos-1-01",
        output=OUTPUT,
        run_id="manual__1",
        state="success",
        submitted_at=1000.0,
        ended_at=1100.0,
        deadline_s=600.0,
        run_after="2026-12-07T16:00:00Z",
        max_restarts=2,
        restarts=1,
        model_sha256=CHIEF_SHA,
        expected_model_sha256=CHIEF_SHA,
        reached_archive=True,
        replicas=("worker-0",),
        archived_logs=("worker-0",),
    )
    return replace(run, **changes)


def good_soak(*runs: RunSeen, **changes: object) -> SoakSeen:
    runs = runs or (good_run(),)
    return replace(SoakSeen(runs=runs, latest={OUTPUT: "manual__1"}), **changes)


def violations_of(soak: SoakSeen, check: Check) -> list[str]:
    return [f"{v.run}: {v.detail}" for v in check_soak(soak)[check]]


def test_the_same_seed_gives_the_same_runs_and_faults_and_another_seed_others():
    assert build_run_plan(7, 30) == build_run_plan(7, 30)
    assert build_fault_plan(7, 12, 10) == build_fault_plan(7, 12, 10)
    assert build_fault_plan(7, 12, 10) != build_fault_plan(8, 12, 10)
    assert build_run_plan(7, 30) != build_run_plan(8, 30)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_every_fault_kind_comes_once_before_any_repeats_in_phases_it_can_hit(seed):
    plan = build_fault_plan(seed, len(FaultKind), 5)
    assert {fault.kind for fault in plan} == set(FaultKind)
    for fault in build_fault_plan(seed, 40, 10):
        assert fault.phase in (POD_PHASES if fault.kind in POD_FAULTS else tuple(Phase)), fault
        assert 0 <= fault.wave < 10


def test_every_phase_is_drawn_over_a_few_seeds():
    phases = {fault.phase for seed in range(5) for fault in build_fault_plan(seed, 11, 4)}
    assert phases == set(Phase)


def test_the_runs_span_the_tenants_in_waves_and_the_first_is_the_scheduled_one():
    plan = build_run_plan(1, 6)
    assert [run.scheduled for run in plan] == [True] + [False] * 5
    assert {run.tenant for run in plan} == set(TENANTS)
    assert [run.wave for run in plan] == [0, 0, 0, 1, 1, 1]
    assert len({run.name for run in plan}) == 6
    assert all(20 <= run.train_s <= 40 for run in plan)


@pytest.mark.parametrize("seed", [0, 1])
def test_every_planned_request_is_valid_and_allowed_by_its_tenant(seed):
    config = load_tenants(REPO_ROOT / "deploy" / "tenants.yaml")
    for run in build_run_plan(seed, 12):
        request = validate_request(build_request(run))
        check_request_policy(request, config.find(run.tenant))
        assert (request.schedule is not None) is run.scheduled


def test_a_plan_of_no_runs_or_negative_faults_is_refused_naming_the_option():
    with pytest.raises(ValueError, match="--runs: 0 given"):
        build_run_plan(1, 0)
    with pytest.raises(ValueError, match="--faults: -1 given"):
        build_fault_plan(1, -1, 1)


def test_a_runs_phase_is_the_latest_phase_with_a_started_task():
    assert read_phase({"validate": "queued"}) is None
    assert read_phase({"validate": "success", "fetch_bundle": "running"}) is Phase.PREPARE
    assert read_phase({"launch": "success", "clusterspec": "success"}) is Phase.LAUNCH
    assert read_phase({"clusterspec": "success", "train": "deferred"}) is Phase.TRAIN
    assert read_phase({"train": "success", "archive": "running"}) is Phase.ARCHIVE


def test_a_good_soak_has_no_violation():
    assert all(found == [] for found in check_soak(good_soak()).values())


def test_a_run_not_ended_or_late_is_named():
    assert violations_of(good_soak(good_run(state=None, ended_at=None)), Check.ENDED_IN_TIME) == [
        "chaos-1-01: not ended: None"
    ]
    late = good_soak(good_run(ended_at=1700.0))
    assert violations_of(late, Check.ENDED_IN_TIME) == [
        "chaos-1-01: ended after 700 s, its deadline is 600 s"
    ]


def test_a_failure_must_name_a_fault_that_hit_the_run():
    named = good_run(
        state="failed",
        faults=(FaultKind.REPLICA_DELETED_GRACE_0,),
        failure_reason="train failed: pod worker-0 deleted; max_restarts 0",
    )
    assert violations_of(good_soak(named, latest={}), Check.FAILURE_NAMES_FAULT) == []
    unexplained = replace(named, failure_reason="validate failed: KeyError 'x'")
    found = violations_of(good_soak(unexplained, latest={}), Check.FAILURE_NAMES_FAULT)
    assert len(found) == 1 and found[0].startswith("chaos-1-01: failed") and "grace 0" in found[0]
    no_fault = replace(named, faults=())
    assert "no fault" in violations_of(good_soak(no_fault, latest={}), Check.FAILURE_NAMES_FAULT)[0]


def test_more_restarts_than_allowed_are_named():
    found = violations_of(good_soak(good_run(restarts=3)), Check.RESTARTS_WITHIN_LIMIT)
    assert found == ["chaos-1-01: 3 gang restarts, max_restarts 2"]


def test_a_success_without_its_chiefs_model_is_named():
    other = standin_model_sha256("worker-1")
    assert violations_of(good_soak(good_run(model_sha256=other)), Check.MODEL_MATCHES_CHIEF)[
        0
    ].startswith("chaos-1-01: model sha256 " + other)
    missing = good_soak(good_run(model_sha256=None))
    assert violations_of(missing, Check.MODEL_MATCHES_CHIEF) == ["chaos-1-01: no model in S3"]
    failed = good_soak(good_run(state="failed", model_sha256=None, failure_reason="deleted"))
    assert violations_of(failed, Check.MODEL_MATCHES_CHIEF) == []


def test_the_standin_models_sha256_is_that_of_the_bytes_the_program_writes():
    assert standin_model_sha256("chief-0") != standin_model_sha256("worker-0")
    assert len(CHIEF_SHA) == 64


def test_latest_must_name_the_newest_success_of_its_output():
    older = good_run(run_id="manual__0", run_after="2026-12-07T15:00:00Z", name="old")
    newer = good_run()
    assert violations_of(good_soak(older, newer), Check.LATEST_IS_NEWEST_SUCCESS) == []
    stale = good_soak(older, newer, latest={OUTPUT: "manual__0"})
    assert violations_of(stale, Check.LATEST_IS_NEWEST_SUCCESS) == [
        f"chaos-1-01: {OUTPUT}latest names manual__0, the newest success is manual__1"
    ]


def test_a_replica_log_missing_after_archive_is_named():
    run = good_run(replicas=("chief-0", "ps-0", "worker-0"), archived_logs=("chief-0",))
    assert violations_of(good_soak(run), Check.LOGS_ARCHIVED) == [
        "chaos-1-01: no archived log of ps-0, worker-0"
    ]
    assert violations_of(good_soak(replace(run, reached_archive=False)), Check.LOGS_ARCHIVED) == []
    # a log run.json explains (its pod deleted before archive) is no violation; others still are
    explained = replace(run, logs_explained=("worker-0",))
    assert violations_of(good_soak(explained), Check.LOGS_ARCHIVED) == [
        "chaos-1-01: no archived log of ps-0"
    ]


def test_anything_left_and_any_credential_found_are_named():
    soak = good_soak(objects_left=("pod tfjob-test/x",), leftovers=("netns: lk-1",))
    assert violations_of(soak, Check.NOTHING_LEFT) == [": pod tfjob-test/x", ": netns: lk-1"]
    hits = good_soak(credential_hits=("a.log: s3 admin secret_key",))
    assert violations_of(hits, Check.NO_CREDENTIAL_IN_LOGS) == [": a.log: s3 admin secret_key"]


def test_secrets_are_found_also_across_two_chunks():
    secrets = {"s3 admin secret_key": "S3CRET-0123456789", "short": "abc"}
    assert find_secrets([("x.log", b"... S3CRET-0123456789 ...")], secrets) == [
        "x.log: s3 admin secret_key"
    ]
    assert find_secrets([("x.log", b"abc only")], secrets) == []  # too short to mean anything
    chunks = list(scan_chunks(iter([b"....S3CRET-01", b"23456789...."]), 17))
    assert find_secrets([("y.log", chunk) for chunk in chunks], secrets) == [
        "y.log: s3 admin secret_key"
    ]


def test_the_report_counts_faults_runs_and_violations_and_replaces_its_section(tmp_path):
    injected = [
        {"kind": "S3 server killed", "phase": "train", "status": "injected", "detail": "pid 1"},
        {"kind": "node stopped", "phase": "launch", "status": "skipped", "detail": "past it"},
    ]
    bad = good_soak(good_run(restarts=5))
    summary = report_chaos.summarise(
        seed=3,
        injected=injected,
        runs=[{"name": "chaos-1-01", "state": "success"}],
        violations=check_soak(bad),
        duration_s=125.0,
        world_up_s=60.0,
        command="python -m bench.chaos --seed 3",
    )
    assert summary["faults_by_kind_and_phase"] == {"S3 server killed / train": 1}
    assert summary["runs_by_outcome"] == {"success": 1}
    assert summary["violation_count"] == 1
    path = tmp_path / "soak.json"
    path.write_text(json.dumps(summary))
    results = tmp_path / "RESULTS.md"
    results.write_text("# Benchmark results\n\n## 9. other\n\ntext\n")
    report_chaos.write_section(results, [path])
    report_chaos.write_section(results, [path, path])  # again: replaced, not appended
    text = results.read_text()
    assert text.count(report_chaos.SECTION_TITLE) == 1 and "## 9. other\n\ntext" in text
    assert "| 3 | 1 | 1 (1) | success 1 | 1 | 2.1 min (60 s) |" in text
    assert "chaos-1-01: 5 gang restarts, max_restarts 2" in text
    assert "node stopped in launch: past it" in text
    assert "Soaks of 30 runs with different seeds recorded: 0 of the 2" in text
    rebuilt = report_chaos.keep_section(text, "# Benchmark results\n\n## 9. other\n\nnew\n")
    assert rebuilt.endswith(text[text.index(report_chaos.SECTION_TITLE) :].rstrip("\n") + "\n")
    assert "new" in rebuilt and report_chaos.keep_section(rebuilt, rebuilt) == rebuilt
