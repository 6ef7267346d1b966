"""`tshell convert` and `tshell submit` of a Kubeflow TFJob file: the request it becomes, or
every refused field named with nothing started."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from harness.repo_root import REPO_ROOT
from tfjob.kubeflow.convert import Destination
from tfjob.kubeflow.manifest import MAX_MANIFEST_BYTES
from tfjob.request.model import load_request
from tshell.cli import run as run_tshell
from tshell.exitcodes import CommandError, ExitCode
from tshell.runs.submit import build_conf

PS_TFJOB = REPO_ROOT / "bundles" / "digits-ps" / "tfjob.yaml"


def refuse_to_start(*args: object, **kwargs: object) -> None:
    raise AssertionError("a refused TFJob must not reach Airflow")


def write_tfjob(tmp_path: Path, change=None) -> Path:
    data = yaml.safe_load(PS_TFJOB.read_text())
    if change is not None:
        change(data)
    path = tmp_path / "tfjob.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_convert_prints_the_request_the_tfjob_becomes(capsys):
    assert run_tshell(["convert", str(PS_TFJOB), "--tenant", "team-a"]) == ExitCode.OK
    printed = yaml.safe_load(capsys.readouterr().out)
    expected = yaml.safe_load((PS_TFJOB.parent / "request.yaml").read_text()) | {"tenant": "team-a"}
    assert load_request(printed) == load_request(expected)


def test_convert_prints_its_notes_as_comments_and_in_json(tmp_path, capsys):
    path = write_tfjob(tmp_path, lambda d: d["spec"]["runPolicy"].pop("cleanPodPolicy"))
    assert run_tshell(["convert", str(path)]) == ExitCode.OK
    text = capsys.readouterr().out
    assert text.startswith("# note: spec.runPolicy.cleanPodPolicy: every pod is removed")
    assert load_request(yaml.safe_load(text)).name == "digits-ps"
    assert run_tshell(["convert", str(path), "--json"]) == ExitCode.OK
    answer = json.loads(capsys.readouterr().out)
    assert answer["request"]["name"] == "digits-ps" and len(answer["notes"]) == 1


def test_submit_of_a_tfjob_with_an_unsupported_field_names_its_path_and_starts_nothing(
    tmp_path, capsys, monkeypatch
):
    def add_volume(data: dict) -> None:
        data["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["volumes"] = [
            {"name": "data", "hostPath": {"path": "/data"}}
        ]

    monkeypatch.setattr("tshell.runs.submit.open_session", refuse_to_start)
    path = write_tfjob(tmp_path, add_volume)
    assert run_tshell(["submit", str(path)]) == ExitCode.INVALID_REQUEST
    err = capsys.readouterr().err
    assert "the TFJob is refused, nothing was started" in err
    assert "spec.tfReplicaSpecs.Worker.template.spec.volumes[0]: " in err


def test_submit_builds_the_converted_request_as_conf_with_overrides(tmp_path, capsys):
    path = write_tfjob(tmp_path)
    place = Destination(tenant="team-a", output="s3://tfjob-output/x")
    conf = build_conf(path, ["replicas.worker=3"], place)
    assert (conf["tenant"], conf["output"], conf["replicas"]["worker"]) == (
        "team-a",
        "s3://tfjob-output/x",
        3,
    )
    assert conf["bundle"] == "s3://tfjob-demo/bundles/digits-ps.tar.gz"  # the annotation's


def test_destination_options_on_a_request_file_are_refused(capsys):
    request = PS_TFJOB.parent / "request.yaml"
    with pytest.raises(CommandError, match="--bundle: for a Kubeflow TFJob file"):
        build_conf(request, [], Destination(bundle="s3://b/k.tar.gz"))


def test_a_file_over_the_limit_is_refused_before_it_is_read(tmp_path, capsys):
    path = tmp_path / "big.yaml"
    path.write_text("#" * (MAX_MANIFEST_BYTES + 1))
    assert run_tshell(["convert", str(path)]) == ExitCode.INVALID_REQUEST
    assert f"at most {MAX_MANIFEST_BYTES} bytes are read" in capsys.readouterr().err
