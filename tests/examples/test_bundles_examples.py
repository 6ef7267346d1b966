"""The example bundles: valid requests, data that matches its export script, bundles that pack.

That each example trains with TensorFlow to its stated accuracy is checked
through the whole pipeline (request file and the tenant's submit DAG) by
tests/pipeline/test_pipeline_tensorflow.py. `digits-tf1-flags` also trains here, as
local processes with real TensorFlow (slow): its point is that the request's
`$(NAME)` args reach a flags-only TF1 program expanded, with and without a
chief, which the launcher does with the bootstrap's own expansion."""

import importlib.util
import re
from pathlib import Path

import pytest

from harness.local_tf_cluster import LocalTFCluster
from harness.repo_root import REPO_ROOT
from runtime.bundle import extract_bundle, write_bundle
from tfjob.request.model import Mode, Strategy, SuccessPolicy, load_request

BUNDLES_DIR = REPO_ROOT / "bundles"
EXAMPLES = ("digits-single", "digits-ps", "digits-mwms", "digits-tf1", "digits-tf1-flags")
# Further requests of a bundle, beside its request.yaml: (bundle, request file).
VARIANTS = (("digits-tf1-flags", "request-chief.yaml"),)
SEED_ERA_ARGS = [
    "--ps_hosts=$(PS_HOSTS)",
    "--worker_hosts=$(WORKER_HOSTS)",
    "--job_name=$(JOB_NAME)",
    "--task_index=$(TASK_INDEX)",
]
# A local run of the flags-only example on 2 shared cores: 3-4 TensorFlow processes.
LOCAL_TRAINING_TIMEOUT_S = 300
# TensorFlow's C++ INFO lines (a PS chief's one per step) off; its warnings stay.
QUIET_TENSORFLOW = {"TF_CPP_MIN_LOG_LEVEL": "1"}
STATED_ACCURACY_PATTERN = re.compile(r"^# Stated accuracy: >= (0\.\d+)", re.MULTILINE)


def import_export_script():
    spec = importlib.util.spec_from_file_location(
        "export_digits", REPO_ROOT / "scripts" / "export_digits.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read_stated_accuracy(name: str, request_file: str = "request.yaml") -> float:
    """The accuracy a bundle promises, from the comment in its request file."""
    text = (BUNDLES_DIR / name / request_file).read_text()
    match = STATED_ACCURACY_PATTERN.search(text)
    assert match, f"{name}/{request_file} has no '# Stated accuracy: >= 0.NN' comment"
    return float(match.group(1))


def test_committed_digits_match_what_the_export_script_makes():
    export_digits = import_export_script()
    assert set(export_digits.EXAMPLE_BUNDLES) == set(EXAMPLES)
    data_dirs = [BUNDLES_DIR / name / "data" for name in EXAMPLES]
    assert export_digits.find_stale_exports(data_dirs) == []


def test_digits_split_is_fixed_scaled_and_stratified():
    import numpy as np

    arrays = import_export_script().split_digits()
    assert arrays["x_train"].shape == (1437, 64) and arrays["x_test"].shape == (360, 64)
    assert arrays["x_train"].dtype == np.float32
    assert 0.0 <= arrays["x_train"].min() and arrays["x_train"].max() == 1.0
    assert sorted(set(arrays["y_test"].tolist())) == list(range(10))
    assert np.bincount(arrays["y_test"]).min() >= 35  # every digit is in the test split


def test_export_check_reports_a_changed_data_file(tmp_path):
    export_digits = import_export_script()
    (written,) = export_digits.export_digits([tmp_path])
    assert export_digits.find_stale_exports([tmp_path]) == []
    written.write_bytes(written.read_bytes()[:-10])
    assert export_digits.find_stale_exports([tmp_path]) == [written]


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_request_is_valid_and_names_its_bundle(name):
    request = load_request(BUNDLES_DIR / name / "request.yaml")
    assert request.name == name
    assert request.tenant == "demo"
    assert request.bundle == f"s3://tfjob-demo/bundles/{name}.tar.gz"
    assert request.output == f"s3://tfjob-demo/outputs/{name}"
    assert request.image == "tensorflow/tensorflow:2.21.0"
    assert (BUNDLES_DIR / name / "code" / request.entrypoint[-1]).is_file()
    assert 0.5 < read_stated_accuracy(name) < 1.0


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_request_meets_its_tenants_policy(name):
    """Else its DAG's validate would refuse it (bundle and output prefixes, image)."""
    from tfjob.tenants import load_tenants, resolve_tenant
    from tfjob.tenants.policy import check_request_policy

    request = load_request(BUNDLES_DIR / name / "request.yaml")
    check_request_policy(request, resolve_tenant(load_tenants(), request.tenant))


def test_example_requests_cover_every_mode_and_strategy():
    requests = {name: load_request(BUNDLES_DIR / name / "request.yaml") for name in EXAMPLES}
    assert requests["digits-single"].mode is Mode.SINGLE
    assert requests["digits-ps"].strategy is Strategy.PARAMETER_SERVER
    assert requests["digits-ps"].replicas.chief == 1
    assert 1 <= requests["digits-ps"].replicas.ps <= 2
    assert requests["digits-ps"].replicas.worker == 2
    assert requests["digits-mwms"].strategy is Strategy.MULTI_WORKER_MIRRORED
    assert requests["digits-mwms"].replicas.worker == 2
    assert requests["digits-tf1"].replicas.chief == 0
    assert requests["digits-tf1"].success_policy is SuccessPolicy.WORKER0
    assert requests["digits-tf1-flags"].args == SEED_ERA_ARGS
    assert requests["digits-tf1-flags"].env == QUIET_TENSORFLOW  # its cluster: args only
    assert requests["digits-tf1-flags"].replicas.chief == 0


def test_every_example_request_keeps_tensorflow_s_info_lines_out_of_its_logs():
    files = sorted(BUNDLES_DIR.glob("*/request*.yaml"))
    assert len(files) == len(EXAMPLES) + len(VARIANTS)
    for path in files:
        env = load_request(path).env
        assert env.items() >= QUIET_TENSORFLOW.items(), path


@pytest.mark.parametrize(("name", "request_file"), VARIANTS)
def test_variant_request_runs_its_bundle_under_its_own_name(name, request_file):
    from tfjob.tenants import load_tenants, resolve_tenant
    from tfjob.tenants.policy import check_request_policy

    request = load_request(BUNDLES_DIR / name / request_file)
    assert request.name == f"{name}-{request_file.removeprefix('request-').removesuffix('.yaml')}"
    assert request.bundle == f"s3://tfjob-demo/bundles/{name}.tar.gz"
    assert request.output == f"s3://tfjob-demo/outputs/{request.name}"
    check_request_policy(request, resolve_tenant(load_tenants(), request.tenant))
    assert 0.5 < read_stated_accuracy(name, request_file) < 1.0


def test_flags_example_with_a_chief_passes_chief_hosts_and_lets_the_chief_decide():
    request = load_request(BUNDLES_DIR / "digits-tf1-flags" / "request-chief.yaml")
    assert request.args == ["--chief_hosts=$(CHIEF_HOSTS)", *SEED_ERA_ARGS]
    assert (request.replicas.chief, request.replicas.ps, request.replicas.worker) == (1, 1, 2)
    assert request.success_policy is SuccessPolicy.CHIEF


def pack_and_extract(name: str, tmp_path: Path) -> Path:
    """The bundle as a pod receives it: packed, then verified and extracted."""
    archive = tmp_path / f"{name}.tar.gz"
    write_bundle(BUNDLES_DIR / name, archive, name)
    workspace = tmp_path / "fetched"
    extract_bundle(archive, workspace)
    return workspace


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_packs_into_a_bundle_of_its_code_and_data(name, tmp_path):
    info = write_bundle(BUNDLES_DIR / name, tmp_path / f"{name}.tar.gz", name)
    paths = sorted(entry.path for entry in info.manifest.files)
    assert paths == ["code/train.py", "data/digits.npz"]
    assert "request.yaml" in info.skipped  # the request travels separately
    assert info.archive_size < 200_000


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_bundle_extracts_as_a_pod_receives_it(name, tmp_path):
    workspace = pack_and_extract(name, tmp_path)
    request = load_request(BUNDLES_DIR / name / "request.yaml")
    assert (workspace / "code" / request.entrypoint[-1]).is_file()
    assert (workspace / "data" / "digits.npz").stat().st_size > 0


@pytest.mark.slow
@pytest.mark.parametrize("request_file", ["request.yaml", "request-chief.yaml"])
def test_flags_only_tf1_program_trains_with_tensorflow_from_its_expanded_args(
    request_file, tmp_path
):
    """ps + 2 workers, and the same with a chief: real TF1 servers on the flags' cluster."""
    name = "digits-tf1-flags"
    request = load_request(BUNDLES_DIR / name / request_file)
    with LocalTFCluster.from_request(BUNDLES_DIR / name, request, tmp_path) as job:
        owner = job.wait_for_owner(timeout_s=LOCAL_TRAINING_TIMEOUT_S)
        trainers = [r for r in job.replicas if r.role != "ps"]
        for trainer in trainers:  # non-owners exit 0 by themselves at the last step
            job.wait_for_exit(trainer, timeout_s=LOCAL_TRAINING_TIMEOUT_S)
        metrics = owner.read_metrics()
        logs = {r.name: r.log_path.read_text(errors="replace") for r in job.replicas}
    print(f"{request.name}: {metrics}")
    assert owner.name == ("chief-0" if request.replicas.chief else "worker-0")
    assert metrics["accuracy"] >= read_stated_accuracy(name, request_file), logs[owner.name]
    assert metrics["steps"] >= 600
    assert any(path.name.startswith("model.ckpt") for path in owner.model_dir.iterdir())
    for replica in job.replicas:  # each built its TF1 ClusterSpec from the expanded flags
        assert (
            f"{replica.role} {replica.index} of {job.cluster!r} serving at" in logs[replica.name]
        ), logs[replica.name][-2000:]
