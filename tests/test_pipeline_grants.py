"""The pods' S3 grants through the whole pipeline: refreshed while training, never leaked.

A real `dag.test()` run on localkube and the local S3: grants signed for
60 s only (TFJOB_GRANT_LIFETIME_SECONDS, the switch for temporary
credentials), a program that trains for 3 minutes, and every grant value
Airflow ever wrote into the run's Secrets searched for everywhere a run
leaves text.
"""

from __future__ import annotations

import base64
import json
import sqlite3
import threading

from pipeline_fixtures import NAMESPACE, pipeline_world  # noqa: F401

from tfjob.naming import job_selector

TRAIN_SECONDS = 180


class Recorder(threading.Thread):
    """Polls the run's Secrets, pods and events while the DAG runs; keeps every value seen."""

    def __init__(self, world, job: str) -> None:  # type: ignore[no-untyped-def]
        super().__init__(daemon=True)
        self.api = world.kube.core_v1()
        self.job = job
        self.stop = threading.Event()
        self.secret_values: dict[str, set[str]] = {"bundle_url": set(), "upload.json": set()}
        self.pods: dict[str, str] = {}
        self.events: list[str] = []

    def run(self) -> None:
        while not self.stop.is_set():
            selector = job_selector(self.job)
            try:
                secrets = self.api.list_namespaced_secret(NAMESPACE, label_selector=selector)
                for secret in secrets.items:
                    for key, value in (secret.data or {}).items():
                        self.secret_values[key].add(base64.b64decode(value).decode())
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
        found = set(self.secret_values["bundle_url"])
        for url in self.secret_values["bundle_url"]:
            found.add(url.split("X-Amz-Signature=")[1])
        for raw in self.secret_values["upload.json"]:
            for grant in json.loads(raw)["grants"].values():
                fields = grant["fields"]
                found.update({fields["policy"], fields["x-amz-signature"]})
        return found


def test_grants_signed_for_60s_are_refreshed_so_a_3_minute_training_uploads_and_none_leaks(
    pipeline_world,  # noqa: F811
) -> None:
    world = pipeline_world
    body = world.request(
        "e2e-grants", env={"STANDIN_BEHAVIOUR": json.dumps({"*": {"sleep": TRAIN_SECONDS}})}
    )
    world.write_request(body)
    recorder = Recorder(world, "e2e-grants")
    recorder.start()
    process = world.start_dag(
        "tfjob__e2e-grants", extra_env={"TFJOB_GRANT_LIFETIME_SECONDS": "60"}
    )
    try:
        result = world.finish_dag(process, timeout=TRAIN_SECONDS + 400)
    finally:
        recorder.stop.set()
        recorder.join()
    assert result.state == "success", result
    prefix = f"outputs/e2e-grants/runs/{result.run_id}/"
    assert prefix + "model/model.json" in world.s3_keys(prefix)
    manifest_text = world.s3_text(prefix + "run.json")
    manifest = json.loads(manifest_text)
    assert not manifest["model"].get("recovered_from_pod"), "the pod's own upload must work"
    replica_log = world.s3_text(prefix + "logs/worker-0.log")
    assert "uploaded 2 files of the model and metrics" in replica_log
    assert "retrying in" not in replica_log  # the grant it read was fresh: no failed attempt
    # 60 s grants, signed anew every 30 s over >3 minutes.
    signed = recorder.secret_values["upload.json"]
    assert len(signed) >= 5, f"{len(signed)} distinct upload grants seen"
    assert "S3 grants of run" in result.log and "signed anew" in result.log

    with sqlite3.connect(world.home / "airflow.db", timeout=30) as db:
        xcoms = json.dumps(
            [str(row) for row in db.execute("SELECT value FROM xcom WHERE dag_id=?",
                                            ("tfjob__e2e-grants",))]
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
