"""A run's S3 layout: S3Path parsed and rendered, and the keys RunLayout names."""

from __future__ import annotations

import pytest

from tfjob.runlayout import (
    RunLayout,
    S3Path,
    locate_output_latest,
    name_run_folder,
    replica_log_path,
    run_output_prefix,
)
from tfjob.s3url import S3UrlError

RUN = "out/job/runs/tfjob__job/manual__2026/"


def test_an_s3_path_renders_the_url_it_was_parsed_from() -> None:
    for url in ("s3://b/a/b.tar.gz", "s3://b/", "s3://b/out/"):
        assert S3Path.parse(url).uri == url
    assert S3Path.parse("s3://b") == S3Path("b", "")
    assert str(S3Path("b", "k")) == "s3://b/k"


def test_an_s3_path_that_is_not_one_names_the_field() -> None:
    with pytest.raises(S3UrlError, match=r"^output: 'http://b/k' given"):
        S3Path.parse("http://b/k", "output")
    with pytest.raises(S3UrlError, match="bucket name is missing"):
        S3Path.parse("s3:///k")


def test_a_folder_ends_in_one_slash_and_the_bucket_root_in_none() -> None:
    assert S3Path("b", "out").prefix == S3Path("b", "out/")
    assert S3Path("b", "out//").prefix == S3Path("b", "out/")
    assert S3Path("b", "").prefix == S3Path("b", "")
    assert S3Path("b", "out").child("latest") == S3Path("b", "out/latest")
    assert S3Path("b", "out/").child("model/") == S3Path("b", "out/model/")
    assert S3Path("b", "").child("latest") == S3Path("b", "latest")


def test_the_run_prefix_holds_the_dag_and_the_run() -> None:
    assert run_output_prefix("s3://b/out/job/", "tfjob__job", "manual__2026") == ("b", RUN)
    assert run_output_prefix("s3://b", "tfjob__job", "r") == ("b", "runs/tfjob__job/r/")
    assert run_output_prefix("s3://b/out", "tfjob__a", "r") != run_output_prefix(
        "s3://b/out", "tfjob__b", "r"
    )
    for dag_id, run_id in (("tfjob__job", "a/b"), ("", "r"), ("tfjob__job", "")):
        with pytest.raises(ValueError, match="a non-empty id without '/' is required"):
            run_output_prefix("s3://b/out", dag_id, run_id)


def test_a_run_layout_names_every_object_of_the_run() -> None:
    layout = RunLayout.for_run("s3://b/out/job", "tfjob__job", "manual__2026")
    assert layout.root == S3Path("b", RUN)
    assert layout.bucket == "b"
    assert layout.uri == "s3://b/" + RUN.rstrip("/")
    assert layout.bundle_snapshot.uri == f"s3://b/{RUN}bundle.tar.gz"
    assert layout.model.key == RUN + "model/"
    assert layout.checkpoints.key == RUN + "checkpoints/"
    assert layout.logs.key == RUN + "logs/"
    assert layout.replica_log("worker", 1).key == RUN + "logs/worker-1.log"
    assert replica_log_path("chief-0") == "logs/chief-0.log"
    assert layout.metrics.key == RUN + "metrics.json"
    assert layout.manifest.key == RUN + "run.json"
    assert layout.file("model/saved_model.pb").key == RUN + "model/saved_model.pb"
    assert layout.path_of(RUN + "model/x") == "model/x"


def test_a_run_layout_reads_the_run_prefix_with_or_without_its_final_slash() -> None:
    layout = RunLayout.for_run("s3://b/out/job", "tfjob__job", "manual__2026")
    assert RunLayout.parse(layout.uri) == layout
    assert RunLayout.parse(layout.uri + "/") == layout
    with pytest.raises(S3UrlError, match="^run_prefix: "):
        RunLayout.parse("b/out", "run_prefix")


def test_a_run_layout_knows_which_run_it_belongs_to() -> None:
    layout = RunLayout.parse("s3://b/out/runs/tfjob__job/r1")
    assert layout.belongs_to("tfjob__job", "r1")
    assert not layout.belongs_to("tfjob__job", "r2")
    assert not layout.belongs_to("tfjob__other", "r1")
    assert name_run_folder("tfjob__job", "r1") == "runs/tfjob__job/r1/"


def test_the_outputs_latest_sits_beside_its_runs() -> None:
    assert locate_output_latest("s3://b/out/job").uri == "s3://b/out/job/latest"
    assert locate_output_latest("s3://b/out/job/").uri == "s3://b/out/job/latest"
    assert locate_output_latest("s3://b").uri == "s3://b/latest"


def test_a_runs_checkpoints_folder_names_the_run_and_its_tensorboard_folder():
    layout = RunLayout.of_checkpoints("s3://b/models/runs/tfjob_submit__a/manual__1/checkpoints/")
    assert layout == RunLayout.for_run("s3://b/models", "tfjob_submit__a", "manual__1")
    assert layout.run_ids == ("tfjob_submit__a", "manual__1")
    assert layout.tensorboard.uri == "s3://b/models/runs/tfjob_submit__a/manual__1/tensorboard/"
    assert RunLayout.of_checkpoints("s3://b/runs/d/r/checkpoints").run_ids == ("d", "r")


@pytest.mark.parametrize(
    "uri",
    [
        "s3://b/checkpoints/",
        "s3://b/models/checkpoints/",
        "s3://b/x/y/z/checkpoints/",
        "s3://b/runs//r/checkpoints/",
        "s3://b/runs/d/r/model/",
    ],
)
def test_a_folder_that_is_no_runs_checkpoints_is_refused_with_what_is_required(uri):
    with pytest.raises(ValueError, match=r"\.\.\./runs/<dag_id>/<run_id>/checkpoints/"):
        RunLayout.of_checkpoints(uri, "warm_start.source")
