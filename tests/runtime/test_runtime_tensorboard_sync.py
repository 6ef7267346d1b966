"""Syncing each replica's TENSORBOARD_DIR to its own `tensorboard/<role>-<index>/` (bootstrap.py).

The same machinery as the checkpoints (runtime/checkpoint_sync.py, `FolderSync`), with
the summaries' grant (`tensorboard.json`, operators/s3access.presign_tensorboard_upload)
and no pointer rule. bootstrap.py runs as a subprocess against the real local S3 server,
as the pod runs it; one pass is also checked in-process through its `send` seam.
"""

from __future__ import annotations

import json
import re
import signal
import textwrap
from pathlib import Path

from harness.checkpoint_fixtures import (
    DAG,
    DEADLINE_S,
    assert_no_credentials,
    list_keys,
    read_object,
    start_bootstrap,
    wait_for,
)
from harness.s3_fixtures import S3Server
from operators.s3access import presign_tensorboard_upload, presign_upload
from runtime import checkpoint_sync, transfer

# --- one pass, in-process ---------------------------------------------------------------------


def record_sends(sent: list[tuple[str, bytes]]) -> checkpoint_sync.Send:
    def send(relative: str, path: str) -> None:
        sent.append((relative, Path(path).read_bytes()))

    return send


def test_a_summaries_pass_resends_grown_files_sends_new_ones_and_nothing_unchanged(
    tmp_path: Path,
) -> None:
    root = tmp_path / "tensorboard"
    (root / "train").mkdir(parents=True)
    events = root / "train" / "events.out.tfevents.1.host.7"
    events.write_bytes(b"step 1")
    (root / "checkpoint").write_bytes(b"a file like any other here")
    uploaded: dict[str, object] = {}
    sent: list[tuple[str, bytes]] = []
    first = checkpoint_sync.sync_pass(str(root), uploaded, record_sends(sent), pointers_last=False)
    assert sent == [
        ("checkpoint", b"a file like any other here"),
        ("train/events.out.tfevents.1.host.7", b"step 1"),
    ]
    assert first.files == 2
    with events.open("ab") as stream:  # TensorFlow appends to its event file
        stream.write(b", step 2")
    (root / "events.out.tfevents.2.host.9").write_bytes(b"restarted")
    sent.clear()
    checkpoint_sync.sync_pass(str(root), uploaded, record_sends(sent), pointers_last=False)
    assert sent == [
        ("events.out.tfevents.2.host.9", b"restarted"),
        ("train/events.out.tfevents.1.host.7", b"step 1, step 2"),
    ]
    sent.clear()
    assert checkpoint_sync.sync_pass(str(root), uploaded, record_sends(sent), False, False) == (
        checkpoint_sync.PassResult(0, 0)
    )
    assert sent == []


def test_a_summaries_grant_names_exactly_one_folder() -> None:
    fields = {"fields": {"key": "k"}}
    policy = transfer.UploadPolicy("http://s3/b", "runs/d/r/", {"tensorboard/chief-0/": fields})
    assert checkpoint_sync.locate_granted_folder(policy) == "runs/d/r/tensorboard/chief-0/"
    for grants in ({}, {"metrics.json": fields}, {"model/": fields, "checkpoints/": fields}):
        policy = transfer.UploadPolicy("http://s3/b", "runs/d/r/", grants)
        try:
            checkpoint_sync.locate_granted_folder(policy)
        except transfer.TransferError as exc:
            assert "exactly one folder" in str(exc)
        else:
            raise AssertionError(f"{grants} was taken for a single-folder grant")


# --- bootstrap.py -----------------------------------------------------------------------------


def make_pod_dirs(tmp_path: Path, program: str) -> dict[str, Path]:
    dirs = {name: tmp_path / name for name in ("workspace", "config", "access")}
    for path in dirs.values():
        path.mkdir()
    (dirs["workspace"] / "code").mkdir()
    (dirs["workspace"] / "code" / "prog.py").write_text(textwrap.dedent(program))
    return dirs


def write_tensorboard_grant(
    server: S3Server, dirs: dict[str, Path], run_id: str, replica: str
) -> dict:
    output = f"s3://{server.bucket}/outputs/job"
    grant = presign_tensorboard_upload(server.presigner(), output, DAG, run_id, replica, 300)
    (dirs["access"] / "tensorboard.json").write_text(json.dumps(grant))
    return grant


def uploads_logged(err: str, what: str = "tensorboard sync") -> int:
    return sum(int(n) for n in re.findall(rf"(?<!final ){what}: uploaded (\d+) files", err))


# Writes as tf.summary does: one event file per writer, appended to while it trains.
SUMMARIES_PROGRAM = """
import os, time
tb, ws = os.environ["TENSORBOARD_DIR"], os.environ["TFJOB_WORKSPACE"]
assert tb == os.path.join(ws, "tensorboard") and os.path.isdir(tb)
def wait_for(name):
    while not os.path.exists(os.path.join(ws, name)):
        time.sleep(0.02)
os.makedirs(os.path.join(tb, "train"))
events = os.path.join(tb, "train", "events.out.tfevents.1.host.7")
open(events, "wb").write(b"step 1")
open(os.path.join(tb, "kept"), "wb").write(b"never changes")
wait_for("go")
open(events, "ab").write(b", step 2")
open(os.path.join(tb, "events.out.tfevents.2.host.7"), "wb").write(b"validation")
wait_for("done")
"""


def test_event_files_go_to_the_replicas_folder_while_training_grown_ones_again(
    tmp_path: Path, s3_server: S3Server
) -> None:
    dirs = make_pod_dirs(tmp_path, SUMMARIES_PROGRAM)
    grant = write_tensorboard_grant(s3_server, dirs, "run-tb-grows", "worker-1")
    at = f"{grant['prefix']}tensorboard/worker-1/"
    events = f"{at}train/events.out.tfevents.1.host.7"
    proc = start_bootstrap(dirs, TFJOB_SYNC_TENSORBOARD="1", TFJOB_CHECKPOINT_INTERVAL="0.5")
    wait_for(lambda: read_object(s3_server, events) == b"step 1", "the first event file")
    assert read_object(s3_server, f"{at}kept") == b"never changes"
    (dirs["workspace"] / "go").touch()
    wait_for(lambda: read_object(s3_server, events) == b"step 1, step 2", "the grown event file")
    wait_for(
        lambda: read_object(s3_server, f"{at}events.out.tfevents.2.host.7") == b"validation",
        "the new event file",
    )
    (dirs["workspace"] / "done").touch()
    out, err = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == 0, err
    assert uploads_logged(err) == 4, err  # `kept` once; nothing left for the final pass
    assert "final tensorboard sync" not in err
    assert sorted(list_keys(s3_server, grant["prefix"])) == sorted(
        [events, f"{at}kept", f"{at}events.out.tfevents.2.host.7"]
    )
    assert_no_credentials(out + err, grant)


SIGTERM_PROGRAM = """
import os, signal, sys, time
tb, ws = os.environ["TENSORBOARD_DIR"], os.environ["TFJOB_WORKSPACE"]
events = os.path.join(tb, "events.out.tfevents.1.host.7")
def flush_and_exit(signum, frame):
    open(events, "ab").write(b", flushed on SIGTERM")
    sys.exit(128 + signum)
signal.signal(signal.SIGTERM, flush_and_exit)
open(events, "wb").write(b"step 1")
open(os.path.join(ws, "ready"), "w").close()
time.sleep(60)
"""


def test_what_the_program_flushes_on_sigterm_goes_up_in_the_final_pass(
    tmp_path: Path, s3_server: S3Server
) -> None:
    dirs = make_pod_dirs(tmp_path, SIGTERM_PROGRAM)
    grant = write_tensorboard_grant(s3_server, dirs, "run-tb-sigterm", "ps-0")
    events = f"{grant['prefix']}tensorboard/ps-0/events.out.tfevents.1.host.7"
    proc = start_bootstrap(dirs, TFJOB_SYNC_TENSORBOARD="1", TFJOB_CHECKPOINT_INTERVAL="600")
    wait_for(lambda: (dirs["workspace"] / "ready").exists(), "the program to start")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == 143, err
    assert read_object(s3_server, events) == b"step 1, flushed on SIGTERM"
    assert "final tensorboard sync: uploaded 1 files" in err
    assert_no_credentials(out + err, grant)


def test_the_model_owner_syncs_checkpoints_and_summaries_each_to_its_grant(
    tmp_path: Path, s3_server: S3Server
) -> None:
    program = """
    import os
    open(os.path.join(os.environ["CHECKPOINT_DIR"], "ckpt-1.index"), "wb").write(b"ckpt")
    open(os.path.join(os.environ["TENSORBOARD_DIR"], "events.out.tfevents.1"), "wb").write(b"ev")
    """
    dirs = make_pod_dirs(tmp_path, program)
    grant = write_tensorboard_grant(s3_server, dirs, "run-tb-owner", "chief-0")
    output = f"s3://{s3_server.bucket}/outputs/job"
    upload = presign_upload(s3_server.presigner(), output, DAG, "run-tb-owner", 300)
    (dirs["access"] / "upload.json").write_text(json.dumps(upload))
    proc = start_bootstrap(
        dirs,
        TFJOB_SYNC_CHECKPOINTS="1",
        TFJOB_SYNC_TENSORBOARD="1",
        TFJOB_CHECKPOINT_INTERVAL="600",
    )
    out, err = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == 0, err
    prefix = grant["prefix"]
    assert sorted(list_keys(s3_server, prefix)) == [
        f"{prefix}checkpoints/ckpt-1.index",
        f"{prefix}tensorboard/chief-0/events.out.tfevents.1",
    ]
    assert err.index("final checkpoint sync") < err.index("final tensorboard sync")
    assert_no_credentials(out + err, grant, upload)


def test_without_the_sync_setting_tensorboard_dir_exists_and_nothing_is_uploaded(
    tmp_path: Path, s3_server: S3Server
) -> None:
    program = """
    import os
    open(os.path.join(os.environ["TENSORBOARD_DIR"], "events.out.tfevents.1"), "wb").write(b"e")
    """
    dirs = make_pod_dirs(tmp_path, program)
    grant = write_tensorboard_grant(s3_server, dirs, "run-tb-off", "worker-0")
    proc = start_bootstrap(dirs, TFJOB_CHECKPOINT_INTERVAL="0.2")
    _, err = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == 0, err
    assert list_keys(s3_server, grant["prefix"]) == []
    assert "tensorboard sync" not in err
