"""Pods and S3 through the whole pipeline: grants, a failed upload, a cleared run.

Real `dag.test()` runs on localkube and the local S3:
- grants signed for 60 s only (TFJOB_GRANT_LIFETIME_SECONDS, the switch for
  temporary credentials), a program that trains for 3 minutes, and every
  grant value Airflow ever wrote into the run's Secrets searched for
  everywhere a run leaves text;
- S3 down for the pods when the model is uploaded: archive copies the model
  out of the owner pod, and the run publishes it;
- a cleared run whose program writes no model publishes nothing.
"""

from __future__ import annotations

import base64
import json
import threading
import time

from harness.pipeline_fixtures import NAMESPACE, run_keys
from tfjob.naming import job_selector

TRAIN_SECONDS = 180


class Recorder(threading.Thread):
    """Polls the run's Secrets, pods and events while the DAG runs; keeps every value seen."""

    def __init__(self, world, job: str) -> None:  # type: ignore[no-untyped-def]
        super().__init__(daemon=True)
        self.api = world.kube.core_v1()
        self.job = job
        self.stop = threading.Event()
        # Every key of the run's Secrets (bundle_url, upload.json, restore.json, each
        # replica's tensorboard-<role>-<index>.json, and any added later): a key this
        # recorder did not foresee must not stop it recording.
        self.secret_values: dict[str, set[str]] = {
            "bundle_url": set(),
            "upload.json": set(),
            "restore.json": set(),
        }
        self.pods: dict[str, str] = {}
        self.events: list[str] = []

    def run(self) -> None:
        while not self.stop.is_set():
            selector = job_selector(self.job)
            try:
                secrets = self.api.list_namespaced_secret(NAMESPACE, label_selector=selector)
                for secret in secrets.items:
                    for key, value in (secret.data or {}).items():
                        self.secret_values.setdefault(key, set()).add(
                            base64.b64decode(value).decode()
                        )
                for pod in self.api.list_namespaced_pod(NAMESPACE, label_selector=selector).items:
                    self.pods[pod.metadata.name] = json.dumps(
                        self.api.api_client.sanitize_for_serialization(pod)
                    )
                self.events = [
                    json.dumps(self.api.api_client.sanitize_for_serialization(e))
                    for e in self.api.list_namespaced_event(NAMESPACE).items
                ]
            except Exception:  # noqa: BLE001 - the API may be busy; poll again
                pass
            self.stop.wait(1.0)

    def credentials(self) -> set[str]:
        """Every secret string: URLs, and each policy's signature, policy and credential."""
        urls = set(self.secret_values["bundle_url"])
        for raw in self.secret_values["restore.json"]:
            urls.update(entry["url"] for entry in json.loads(raw)["files"])
        found = set(urls)
        for url in urls:
            found.add(url.split("X-Amz-Signature=")[1])
        uploads = [
            raw
            for key, raw_values in self.secret_values.items()
            for raw in raw_values
            if key == "upload.json" or key.startswith("tensorboard-")
        ]
        for raw in uploads:
            for grant in json.loads(raw)["grants"].values():
                fields = grant["fields"]
                found.update({fields["policy"], fields["x-amz-signature"]})
        return found


def test_grants_signed_for_60s_are_refreshed_so_a_3_minute_training_uploads_and_none_leaks(
    pipeline_world,
) -> None:
    world = pipeline_world
    body = world.request(
        "e2e-grants", env={"STANDIN_BEHAVIOUR": json.dumps({"*": {"sleep": TRAIN_SECONDS}})}
    )
    world.write_request(body)
    recorder = Recorder(world, "e2e-grants")
    recorder.start()
    process = world.start_dag("tfjob__e2e-grants", extra_env={"TFJOB_GRANT_LIFETIME_SECONDS": "60"})
    try:
        result = world.finish_dag(process, timeout=TRAIN_SECONDS + 400)
    finally:
        recorder.stop.set()
        recorder.join()
    assert result.state == "success", result
    prefix = run_keys(result)
    assert prefix + "model/model.json" in world.s3_keys(prefix)
    manifest_text = world.s3_text(prefix + "run.json")
    manifest = json.loads(manifest_text)
    assert not manifest["model"].get("recovered_from_pod"), "the pod's own upload must work"
    replica_log = world.s3_text(prefix + "logs/worker-0.log")
    assert "uploaded 2 files of the model and metrics" in replica_log
    assert "retrying in" not in replica_log  # the grant it read was fresh: no failed attempt
    # 60 s grants, signed anew every 30 s over >3 minutes.
    summaries = "tensorboard-worker-0.json"  # the replica's own summaries grant
    assert set(recorder.secret_values) == {"bundle_url", "upload.json", "restore.json", summaries}
    for key in ("upload.json", summaries):
        signed = recorder.secret_values[key]
        assert len(signed) >= 5, f"{len(signed)} distinct {key} grants seen"
    assert "S3 grants of run" in result.log and "signed anew" in result.log

    xcoms = json.dumps(
        [
            str(row)
            for row in world.query_airflow_db(
                "SELECT value FROM xcom WHERE dag_id = :dag_id", dag_id="tfjob__e2e-grants"
            )
        ]
    )
    places = {
        "task log": result.log,
        "run.json": manifest_text,
        "replica log": replica_log,
        "xcom": xcoms,
        "pod specs": "\n".join(recorder.pods.values()),
        "events": "\n".join(recorder.events),
    }
    secrets = recorder.credentials() | {world.s3.secret_key, world.s3.access_key}
    assert len(secrets) > 10
    for where, text in places.items():
        for secret in secrets:
            assert secret not in text, f"a credential appears in the {where}"
    assert world.run_objects("e2e-grants") == []


def wait_for_running_pod(world, job: str, timeout: float = 180.0) -> None:  # type: ignore[no-untyped-def]
    api = world.kube.core_v1()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pods = api.list_namespaced_pod(NAMESPACE, label_selector=job_selector(job)).items
        if pods and all(p.status.phase == "Running" for p in pods):
            return
        time.sleep(0.5)
    raise AssertionError(f"the pods of {job} were not Running within {timeout}s")


def set_pod_outage(world, seconds: float) -> None:  # type: ignore[no-untyped-def]
    """S3 answers the pods 503 for `seconds` (scripts/s3_gate.py's test switch; admin key)."""
    status, body = world.s3.moto_api(f"tfjob/pod-outage?seconds={seconds}", "POST")
    assert status == 200, body


def test_a_model_whose_upload_fails_with_s3_down_is_copied_out_of_the_pod_and_published(
    pipeline_world,
) -> None:
    world = pipeline_world
    body = world.request("e2e-recover", env={"STANDIN_BEHAVIOUR": json.dumps({"*": {"sleep": 20}})})
    world.write_request(body)
    process = world.start_dag(
        "tfjob__e2e-recover", extra_env={"TFJOB_UPLOAD_PATIENCE_SECONDS": "5"}
    )
    wait_for_running_pod(world, "e2e-recover")
    # From now on S3 answers the pods 503 (Airflow's own calls still go through).
    set_pod_outage(world, 300)
    try:
        result = world.finish_dag(process)
    finally:
        set_pod_outage(world, 0)  # the next test's pods need S3
    assert result.state == "success", result
    assert "could not upload its model; archive copies it out of pod" in result.log
    prefix = run_keys(result)
    manifest = json.loads(world.s3_text(prefix + "run.json"))
    assert manifest["model"]["recovered_from_pod"] is True, manifest["model"]
    assert manifest["replicas"][0]["exit_code"] == 74
    assert json.loads(world.s3_text(prefix + "model/model.json")) == {
        "trained_by": "worker-0",
        "total": 6,
    }
    assert json.loads(world.s3_text(prefix + "metrics.json"))["accuracy"] == 0.99
    replica_log = world.s3_text(prefix + "logs/worker-0.log")
    assert "SlowDown" in replica_log and "gave up after" in replica_log
    latest = json.loads(world.s3_text("outputs/e2e-recover/latest"))
    assert latest["run_id"] == result.run_id
    assert world.run_objects("e2e-recover") == []


def test_a_cleared_run_whose_program_writes_no_model_publishes_nothing(
    pipeline_world,
) -> None:
    world = pipeline_world
    when = "2026-12-01T00:00:00+00:00"
    first = world.run_request(world.request("e2e-cleared"), logical_date=when)
    assert first.state == "success", first
    prefix = run_keys(first)
    assert prefix + "model/model.json" in world.s3_keys(prefix)
    # The same run again (as clearing it does), now with a program that writes no model.
    body = world.request(
        "e2e-cleared", env={"STANDIN_BEHAVIOUR": json.dumps({"*": {"no_model": True}})}
    )
    again = world.run_request(body, logical_date=when)
    assert again.run_id == first.run_id
    assert again.state == "failed" and again.tasks["publish"] == "failed", again
    assert "nothing to publish: no model under" in again.log
    keys = world.s3_keys(prefix)
    assert not [k for k in keys if k.startswith(prefix + "model/")], keys
    assert prefix + "metrics.json" not in keys
    manifest = json.loads(world.s3_text(prefix + "run.json"))
    assert manifest["model"]["objects"] == 0
