"""The local TensorFlow-cluster launcher used by the example tests and benchmarks,
checked with tiny Python programs instead of TensorFlow (fast)."""

import os
import textwrap

import pytest

from harness.local_tf_cluster import LocalTFCluster, ReplicaFailed, allocate_free_ports
from harness.repo_root import REPO_ROOT
from tfjob.request.model import load_request

BUNDLES = REPO_ROOT / "bundles"

# A stand-in training program: reports its environment, then behaves like a
# replica of a parameter-server job (ps/worker join forever, the chief exits).
FAKE_TRAIN = textwrap.dedent(
    """
    import json, os, sys, time
    config = json.loads(os.environ.get("TF_CONFIG", "null") or "null")
    seen = {name: os.environ.get(name) for name in (
        "PS_HOSTS", "WORKER_HOSTS", "CHIEF_HOSTS", "JOB_NAME", "TASK_INDEX", "DATA_DIR",
        "MODEL_DIR", "LOG_DIR", "METRICS_FILE", "TFJOB_ROLE", "TFJOB_INDEX", "TFJOB_UPLOAD_MODEL",
        "EXTRA")}
    seen["TF_CONFIG"] = config
    seen["cwd"] = os.getcwd()
    seen["argv"] = sys.argv[1:]
    os.makedirs(os.path.dirname(os.environ["METRICS_FILE"]), exist_ok=True)
    with open(os.environ["METRICS_FILE"], "w") as out:
        json.dump(seen, out)
    role = os.environ["TFJOB_ROLE"]
    if role == "worker" and os.environ.get("FAIL_WORKER") == os.environ["TFJOB_INDEX"]:
        sys.exit(3)
    if role in ("ps", "worker") and os.environ.get("JOIN") == "1":
        while True:
            time.sleep(60)
    """
)


@pytest.fixture
def fake_bundle(tmp_path):
    bundle = tmp_path / "bundle"
    (bundle / "code").mkdir(parents=True)
    (bundle / "data").mkdir()
    (bundle / "code" / "train.py").write_text(FAKE_TRAIN)
    return bundle


def is_process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_free_ports_are_distinct():
    ports = allocate_free_ports(5)
    assert len(set(ports)) == 5 and all(port > 0 for port in ports)


def test_each_replica_gets_the_pod_environment(fake_bundle, tmp_path):
    replicas = {"chief": 1, "ps": 1, "worker": 2}
    with LocalTFCluster(
        fake_bundle, replicas, tmp_path / "run", ("train.py", "--flag"), {"EXTRA": "x"}
    ) as job:
        for replica in job.replicas:
            job.wait_for_exit(replica, timeout_s=30)
    seen = {r.name: r.read_metrics() for r in job.replicas}

    ports = [
        address.rsplit(":", 1)[1] for addresses in job.cluster.values() for address in addresses
    ]
    assert len(set(ports)) == 4
    assert all(a.startswith("127.0.0.1:") for addrs in job.cluster.values() for a in addrs)
    worker1 = seen["worker-1"]
    assert worker1["TF_CONFIG"] == {"cluster": job.cluster, "task": {"type": "worker", "index": 1}}
    assert worker1["PS_HOSTS"] == job.cluster["ps"][0]
    assert worker1["WORKER_HOSTS"] == ",".join(job.cluster["worker"])
    assert (worker1["JOB_NAME"], worker1["TASK_INDEX"]) == ("worker", "1")
    assert (worker1["TFJOB_ROLE"], worker1["TFJOB_INDEX"]) == ("worker", "1")
    assert worker1["MODEL_DIR"] == str(tmp_path / "run" / "worker-1" / "model")
    assert worker1["DATA_DIR"] == str(fake_bundle / "data")
    assert worker1["cwd"] == str(fake_bundle / "code")
    assert worker1["argv"] == ["--flag"] and worker1["EXTRA"] == "x"
    assert [name for name, env in seen.items() if env["TFJOB_UPLOAD_MODEL"] == "1"] == ["chief-0"]
    assert job.owner.name == "chief-0"


def test_args_are_expanded_per_replica_as_the_pod_bootstrap_does(fake_bundle, tmp_path):
    """The flags-only example's own request, run with the stand-in program."""
    request = load_request(BUNDLES / "digits-tf1-flags" / "request-chief.yaml")
    with LocalTFCluster.from_request(fake_bundle, request, tmp_path / "run") as job:
        for replica in job.replicas:
            job.wait_for_exit(replica, timeout_s=30)
    seen = {r.name: r.read_metrics() for r in job.replicas}
    cluster_flags = [
        f"--chief_hosts={job.cluster['chief'][0]}",
        f"--ps_hosts={job.cluster['ps'][0]}",
        f"--worker_hosts={','.join(job.cluster['worker'])}",
    ]
    for name, env in seen.items():
        role, index = name.split("-")
        assert env["argv"] == [*cluster_flags, f"--job_name={role}", f"--task_index={index}"]
        assert env["CHIEF_HOSTS"] == job.cluster["chief"][0]


def test_escaped_and_unset_references_reach_the_program_as_written(fake_bundle, tmp_path):
    argv = ("train.py", "--literal=$$(JOB_NAME)", "--unset=$(NOT_SET)", "--x=$(EXTRA)")
    with LocalTFCluster(
        fake_bundle, {"ps": 1, "worker": 1}, tmp_path / "run", argv, {"EXTRA": "x"}
    ) as job:
        seen = job.wait_for_owner(timeout_s=30).read_metrics()
    assert seen["argv"] == ["--literal=$(JOB_NAME)", "--unset=$(NOT_SET)", "--x=x"]
    assert seen["CHIEF_HOSTS"] is None  # no chief, no CHIEF_HOSTS


def test_single_mode_replica_gets_no_cluster(fake_bundle, tmp_path):
    with LocalTFCluster(fake_bundle, {"worker": 1}, tmp_path / "run", distributed=False) as job:
        seen = job.wait_for_owner(timeout_s=30).read_metrics()
    assert seen["TF_CONFIG"] is None and seen["PS_HOSTS"] is None
    assert seen["TFJOB_UPLOAD_MODEL"] == "1" and seen["TFJOB_ROLE"] == "worker"


def test_joining_replicas_are_killed_when_the_job_stops(fake_bundle, tmp_path):
    replicas = {"chief": 1, "ps": 2, "worker": 2}
    with LocalTFCluster(fake_bundle, replicas, tmp_path / "run", extra_env={"JOIN": "1"}) as job:
        job.wait_for_owner(timeout_s=30)
        joining = [r for r in job.replicas if r.role != "chief"]
        assert all(r.process.poll() is None for r in joining)
        pids = [r.process.pid for r in job.replicas]
    assert not [pid for pid in pids if is_process_alive(pid)]
    assert all(r.process.returncode == -9 for r in joining)


def test_a_failing_replica_fails_the_wait_with_its_log(fake_bundle, tmp_path):
    env = {"JOIN": "1", "FAIL_WORKER": "1"}
    replicas = {"ps": 1, "worker": 2}
    with LocalTFCluster(fake_bundle, replicas, tmp_path / "run", extra_env=env) as job:
        with pytest.raises(ReplicaFailed, match="worker-1 exited with code 3"):
            job.wait_for_exit(job.replica("ps", 0), timeout_s=30)


def test_a_replica_that_does_not_finish_in_time_fails_the_wait(fake_bundle, tmp_path):
    with LocalTFCluster(
        fake_bundle, {"ps": 1, "worker": 1}, tmp_path / "run", extra_env={"JOIN": "1"}
    ) as job:
        with pytest.raises(ReplicaFailed, match="ps-0 still running after 1 s"):
            job.wait_for_exit(job.replica("ps", 0), timeout_s=1)


def test_unknown_roles_are_refused(fake_bundle, tmp_path):
    with pytest.raises(ValueError, match=r"unknown role\(s\) \['evaluator'\]"):
        LocalTFCluster(fake_bundle, {"worker": 1, "evaluator": 1}, tmp_path)
