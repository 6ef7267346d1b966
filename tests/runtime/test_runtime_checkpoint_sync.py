"""Syncing checkpoints from the pod (runtime/checkpoint_sync.py, run by bootstrap.py).

bootstrap.py runs as a subprocess against the real local S3 server, as the
pod runs it; the order of a sync pass is also checked in-process through its
`send` seam.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import textwrap
from pathlib import Path

import pytest

from harness.checkpoint_fixtures import (
    DAG,
    DEADLINE_S,
    POINTER_TEXT,
    assert_no_credentials,
    list_keys,
    read_object,
    start_bootstrap,
    wait_for,
)
from harness.s3_fixtures import S3Server
from operators.s3access import presign_upload
from runtime import checkpoint_sync, transfer

# --- one sync pass, in-process --------------------------------------------------------------


def write_atomically(path: Path, body: bytes) -> None:
    """As TensorFlow does: a temporary name, then a rename (here outside the synced tree)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.parent.with_name(".scratch")  # beside the synced tree's root
    for parent in path.parents:
        if parent.name == "checkpoints":
            temporary = parent.with_name(".scratch")
    temporary.write_bytes(body)
    os.replace(temporary, path)


def make_checkpoint(root: Path, n: int, subdir: str = "") -> None:
    base = root / subdir if subdir else root
    write_atomically(base / f"ckpt-{n}.index", f"index {n}".encode())
    write_atomically(base / f"ckpt-{n}.data-00000-of-00001", bytes(n * 100))
    write_atomically(base / "checkpoint", POINTER_TEXT.format(n=n).encode())


class Recorder:
    """A `send` that records what it was given (the pointer by its content: a snapshot)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes]] = []

    def __call__(self, relative: str, path: str) -> None:
        self.sent.append((relative, Path(path).read_bytes()))

    def names(self) -> list[str]:
        return [relative for relative, _ in self.sent]


def test_a_pass_sends_every_pointer_after_every_other_file(tmp_path: Path) -> None:
    root = tmp_path / "checkpoints"
    make_checkpoint(root, 1)
    make_checkpoint(root, 2, subdir="eval")
    send = Recorder()
    result = checkpoint_sync.sync_pass(str(root), {}, send)
    assert send.names() == [
        "ckpt-1.data-00000-of-00001",
        "ckpt-1.index",
        "eval/ckpt-2.data-00000-of-00001",
        "eval/ckpt-2.index",
        "checkpoint",
        "eval/checkpoint",
    ]
    assert dict(send.sent)["eval/checkpoint"] == POINTER_TEXT.format(n=2).encode()
    assert result.files == 6 and result.bytes == sum(len(body) for _, body in send.sent)


def test_unchanged_files_are_not_sent_again_and_changed_ones_are(tmp_path: Path) -> None:
    root = tmp_path / "checkpoints"
    make_checkpoint(root, 1)
    uploaded: dict[str, object] = {}
    checkpoint_sync.sync_pass(str(root), uploaded, Recorder())
    again = Recorder()
    assert checkpoint_sync.sync_pass(str(root), uploaded, again).files == 0 and again.sent == []
    write_atomically(root / "ckpt-1.index", b"index 1, rewritten")
    make_checkpoint(root, 2)
    changed = Recorder()
    checkpoint_sync.sync_pass(str(root), uploaded, changed)
    assert changed.names() == [
        "ckpt-1.index",
        "ckpt-2.data-00000-of-00001",
        "ckpt-2.index",
        "checkpoint",
    ]


def test_a_pointer_that_moved_during_the_pass_goes_when_what_it_names_is_uploaded(
    tmp_path: Path,
) -> None:
    root = tmp_path / "checkpoints"
    make_checkpoint(root, 1)
    send = Recorder()

    def send_while_training(relative: str, path: str) -> None:
        send(relative, path)
        if not (root / "ckpt-2.index").exists():
            make_checkpoint(root, 2)

    uploaded: dict[str, object] = {}
    checkpoint_sync.sync_pass(str(root), uploaded, send_while_training)
    assert send.sent[-1] == ("checkpoint", POINTER_TEXT.format(n=1).encode())
    assert "ckpt-2.index" not in send.names()  # listed before TensorFlow wrote it
    checkpoint_sync.sync_pass(str(root), uploaded, send)
    assert send.sent[-1] == ("checkpoint", POINTER_TEXT.format(n=2).encode())


def test_a_pointer_that_moved_and_names_files_never_uploaded_waits_for_the_next_pass(
    tmp_path: Path,
) -> None:
    """As if TensorFlow deleted ckpt-1 between the pointer's snapshot and the listing."""
    root = tmp_path / "checkpoints"
    make_checkpoint(root, 2)
    write_atomically(root / "checkpoint", POINTER_TEXT.format(n=1).encode())
    send = Recorder()

    def send_while_training(relative: str, path: str) -> None:
        send(relative, path)
        write_atomically(root / "checkpoint", POINTER_TEXT.format(n=2).encode())

    uploaded: dict[str, object] = {}
    checkpoint_sync.sync_pass(str(root), uploaded, send_while_training)
    assert "checkpoint" not in send.names()
    checkpoint_sync.sync_pass(str(root), uploaded, send)
    assert send.sent[-1] == ("checkpoint", POINTER_TEXT.format(n=2).encode())


@pytest.mark.parametrize(
    "pointer, listed, named",
    [
        (b'model_checkpoint_path: "ckpt-3"', ["ckpt-3.index", "ckpt-3.data-00000-of-00001"], True),
        (b'model_checkpoint_path: "ckpt-3"', ["ckpt-3.index", "ckpt-3.data-00001-of-00002"], False),
        (b'model_checkpoint_path: "ckpt-3"', ["ckpt-3.data-00000-of-00001"], False),
        (
            b'model_checkpoint_path: "ckpt-3"',
            ["ckpt-33.index", "ckpt-33.data-00000-of-00001"],
            False,
        ),
        (
            b'model_checkpoint_path: "../x/ckpt-3"',
            ["ckpt-3.index", "ckpt-3.data-00000-of-00001"],
            False,
        ),
        (
            b'model_checkpoint_path: "{root}/ckpt-3"',
            ["ckpt-3.index", "ckpt-3.data-00000-of-00001"],
            True,
        ),
        (b"not a pointer", ["ckpt-3.index", "ckpt-3.data-00000-of-00001"], False),
    ],
)
def test_what_a_pointer_names_counts_as_uploaded_with_its_index_and_every_shard(
    tmp_path: Path, pointer: bytes, listed: list[str], named: bool
) -> None:
    content = pointer.replace(b"{root}", str(tmp_path).encode())
    uploaded: dict[str, object] = {path: (1, 1) for path in listed}
    assert (
        checkpoint_sync.is_named_checkpoint_uploaded("checkpoint", content, uploaded, str(tmp_path))
        is named
    )


def test_a_file_deleted_during_a_pass_is_skipped(tmp_path: Path) -> None:
    root = tmp_path / "checkpoints"
    make_checkpoint(root, 1)
    send = Recorder()

    def send_after_tensorflow_deleted_it(relative: str, path: str) -> None:
        if relative == "ckpt-1.data-00000-of-00001":
            os.unlink(path)
            raise FileNotFoundError(path)
        send(relative, path)

    result = checkpoint_sync.sync_pass(str(root), {}, send_after_tensorflow_deleted_it)
    assert send.names() == ["ckpt-1.index", "checkpoint"] and result.files == 2


def test_a_failed_upload_ends_the_pass_without_its_pointer(tmp_path: Path) -> None:
    root = tmp_path / "checkpoints"
    make_checkpoint(root, 1)
    send = Recorder()

    def send_failing_once(relative: str, path: str) -> None:
        if relative == "ckpt-1.index" and "ckpt-1.index" not in send.names():
            send.sent.append((relative, b"failed"))
            raise transfer.TransferError("upload of ckpt-1.index: HTTP 503")
        send(relative, path)

    uploaded: dict[str, object] = {}
    with pytest.raises(transfer.TransferError):
        checkpoint_sync.sync_pass(str(root), uploaded, send_failing_once)
    assert "checkpoint" not in send.names() and "ckpt-1.index" not in uploaded
    checkpoint_sync.sync_pass(str(root), uploaded, send_failing_once)
    assert send.names()[-2:] == ["ckpt-1.index", "checkpoint"]


# --- sync: bootstrap.py -----------------------------------------------------------------------


def make_pod_dirs(tmp_path: Path, program: str) -> dict[str, Path]:
    dirs = {name: tmp_path / name for name in ("workspace", "config", "access")}
    for path in dirs.values():
        path.mkdir()
    (dirs["workspace"] / "code").mkdir()
    (dirs["workspace"] / "code" / "prog.py").write_text(textwrap.dedent(program))
    return dirs


def write_upload_json(server: S3Server, dirs: dict[str, Path], run_id: str) -> dict:
    grant = presign_upload(
        server.presigner(), f"s3://{server.bucket}/outputs/job", DAG, run_id, 300
    )
    (dirs["access"] / "upload.json").write_text(json.dumps(grant))
    return grant


def uploads_logged(err: str) -> int:
    return sum(int(n) for n in re.findall(r"checkpoint sync: uploaded (\d+) files", err))


# Writes checkpoints as TensorFlow's CheckpointManager(max_to_keep=2) does: the
# files, then the pointer, then the old files go.
TRAINING_PROGRAM = """
import os, sys, time
ckpt, ws = os.environ["CHECKPOINT_DIR"], os.environ["TFJOB_WORKSPACE"]
assert os.path.isdir(ckpt)
def write(name, body):
    temporary = os.path.join(ws, "." + name + ".tmp")
    open(temporary, "wb").write(body)
    os.replace(temporary, os.path.join(ckpt, name))
for n in range(1, int(os.environ["STEPS"]) + 1):
    write(f"ckpt-{n}.index", b"index %d" % n)
    write(f"ckpt-{n}.data-00000-of-00001", bytes(1000 * n))
    write("checkpoint", os.environ["POINTER"].format(n=n).encode())
    if str(n) in os.environ.get("HOLD_AT", "").split(","):  # until the test saw step n in S3
        deadline = time.monotonic() + 120
        while not os.path.exists(os.path.join(ws, f"proceed-{n}")) and time.monotonic() < deadline:
            time.sleep(0.02)
    for old in (f"ckpt-{n - 2}.index", f"ckpt-{n - 2}.data-00000-of-00001"):
        if os.path.exists(os.path.join(ckpt, old)):
            os.unlink(os.path.join(ckpt, old))
    time.sleep(float(os.environ.get("PAUSE", "0")))
os.makedirs(os.environ["MODEL_DIR"], exist_ok=True)
open(os.path.join(os.environ["MODEL_DIR"], "saved_model.pb"), "wb").write(b"graph")
"""


def check_pointer_names_stored_files(server: S3Server, prefix: str) -> int | None:
    """The step S3's pointer names, after checking that its files are there (None: no pointer)."""
    pointer = read_object(server, f"{prefix}checkpoints/checkpoint")
    if pointer is None:
        return None
    step = int(re.search(rb'model_checkpoint_path: "ckpt-(\d+)"', pointer).group(1))  # type: ignore[union-attr]
    keys = list_keys(server, f"{prefix}checkpoints/")
    for name in (f"ckpt-{step}.index", f"ckpt-{step}.data-00000-of-00001"):
        assert f"{prefix}checkpoints/{name}" in keys, f"the pointer names ckpt-{step}: {keys}"
    return step


def test_while_training_the_pointer_in_s3_only_names_checkpoints_already_there(
    tmp_path: Path, s3_server: S3Server
) -> None:
    dirs = make_pod_dirs(tmp_path, TRAINING_PROGRAM)
    grant = write_upload_json(s3_server, dirs, "run-sync-order")
    prefix = grant["prefix"]
    # The program holds at steps 1 and 6 until the test has seen that step's pointer in S3
    # (a busy machine could otherwise delete ckpt-1 locally before the first pass runs).
    proc = start_bootstrap(
        dirs,
        TFJOB_SYNC_CHECKPOINTS="1",
        TFJOB_CHECKPOINT_INTERVAL="0.2",
        STEPS="12",
        PAUSE="0.05",
        POINTER=POINTER_TEXT,
        HOLD_AT="1,6",
    )
    steps_seen = set()
    for held in (1, 6):

        def pointer_at_held_step(held: int = held) -> bool:
            steps_seen.add(check_pointer_names_stored_files(s3_server, prefix))
            assert proc.poll() is None, proc.communicate()[1]
            return held in steps_seen

        wait_for(pointer_at_held_step, f"the pointer in S3 naming ckpt-{held}")
        (dirs["workspace"] / f"proceed-{held}").touch()
    while proc.poll() is None:
        steps_seen.add(check_pointer_names_stored_files(s3_server, prefix))
    out, err = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == 0, err
    assert check_pointer_names_stored_files(s3_server, prefix) == 12
    assert {1, 6} <= steps_seen, "the pointer should move while the program runs"
    assert f"{prefix}checkpoints/ckpt-1.index" in list_keys(s3_server, prefix)  # never deleted
    assert_no_credentials(out + err, grant)


def test_the_final_pass_copies_what_the_program_left_before_the_model_is_uploaded(
    tmp_path: Path, s3_server: S3Server
) -> None:
    dirs = make_pod_dirs(tmp_path, TRAINING_PROGRAM)
    grant = write_upload_json(s3_server, dirs, "run-sync-final")
    prefix = grant["prefix"]
    proc = start_bootstrap(
        dirs,
        TFJOB_SYNC_CHECKPOINTS="1",
        TFJOB_CHECKPOINT_INTERVAL="600",
        TFJOB_UPLOAD_MODEL="1",
        STEPS="3",
        POINTER=POINTER_TEXT,
    )
    _, err = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == 0, err
    assert list_keys(s3_server, f"{prefix}checkpoints/") == [
        f"{prefix}checkpoints/{name}"
        for name in (
            "checkpoint",
            "ckpt-2.data-00000-of-00001",
            "ckpt-2.index",
            "ckpt-3.data-00000-of-00001",
            "ckpt-3.index",
        )
    ]
    lines = err.splitlines()
    size = sum(p.stat().st_size for p in (dirs["workspace"] / "checkpoints").iterdir())
    final = lines.index(f"tfjob-bootstrap: final checkpoint sync: uploaded 5 files ({size} bytes)")
    model = next(i for i, line in enumerate(lines) if "files of the model" in line)
    assert lines.index("tfjob-bootstrap: program exited with 0") < final < model


CHANGING_PROGRAM = """
import os, sys, time
ckpt, ws = os.environ["CHECKPOINT_DIR"], os.environ["TFJOB_WORKSPACE"]
def write(name, body):
    temporary = os.path.join(ws, ".tmp")
    open(temporary, "wb").write(body)
    os.replace(temporary, os.path.join(ckpt, name))
def wait_for(name):
    while not os.path.exists(os.path.join(ws, name)):
        time.sleep(0.02)
write("state.bin", b"state 1")
write("kept.bin", b"never changes")
write("checkpoint", b"pointer 1")
wait_for("go")
write("state.bin", b"state 2, longer")
write("new.bin", b"new")
write("checkpoint", b"pointer 2")
wait_for("done")
"""


def test_new_and_changed_files_are_uploaded_while_the_program_runs_unchanged_ones_once(
    tmp_path: Path, s3_server: S3Server
) -> None:
    dirs = make_pod_dirs(tmp_path, CHANGING_PROGRAM)
    grant = write_upload_json(s3_server, dirs, "run-sync-changes")
    at = f"{grant['prefix']}checkpoints/"
    proc = start_bootstrap(dirs, TFJOB_SYNC_CHECKPOINTS="1", TFJOB_CHECKPOINT_INTERVAL="0.5")
    wait_for(lambda: read_object(s3_server, f"{at}checkpoint") == b"pointer 1", "the 1st pointer")
    assert read_object(s3_server, f"{at}state.bin") == b"state 1"
    assert read_object(s3_server, f"{at}kept.bin") == b"never changes"
    (dirs["workspace"] / "go").touch()
    wait_for(lambda: read_object(s3_server, f"{at}checkpoint") == b"pointer 2", "the 2nd pointer")
    assert read_object(s3_server, f"{at}state.bin") == b"state 2, longer"
    assert read_object(s3_server, f"{at}new.bin") == b"new"
    (dirs["workspace"] / "done").touch()
    _, err = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == 0, err
    assert uploads_logged(err) == 6, err  # kept.bin once; nothing left for the final pass
    assert "final checkpoint sync" not in err


SIGTERM_PROGRAM = """
import os, signal, sys, time
ckpt, ws = os.environ["CHECKPOINT_DIR"], os.environ["TFJOB_WORKSPACE"]
def save_and_exit(signum, frame):
    open(os.path.join(ckpt, "ckpt-7.index"), "wb").write(b"saved on SIGTERM")
    open(os.path.join(ckpt, "checkpoint"), "wb").write(b'model_checkpoint_path: "ckpt-7"')
    sys.exit(128 + signum)
signal.signal(signal.SIGTERM, save_and_exit)
open(os.path.join(ws, "ready"), "w").close()
time.sleep(60)
"""


def test_a_checkpoint_saved_on_sigterm_is_uploaded_by_the_final_pass(
    tmp_path: Path, s3_server: S3Server
) -> None:
    dirs = make_pod_dirs(tmp_path, SIGTERM_PROGRAM)
    grant = write_upload_json(s3_server, dirs, "run-sync-sigterm")
    at = f"{grant['prefix']}checkpoints/"
    proc = start_bootstrap(
        dirs, TFJOB_SYNC_CHECKPOINTS="1", TFJOB_CHECKPOINT_INTERVAL="600", TFJOB_UPLOAD_MODEL="1"
    )
    wait_for(lambda: (dirs["workspace"] / "ready").exists(), "the program to start")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == 143, err
    assert read_object(s3_server, f"{at}ckpt-7.index") == b"saved on SIGTERM"
    assert read_object(s3_server, f"{at}checkpoint") == b'model_checkpoint_path: "ckpt-7"'
    assert "final checkpoint sync: uploaded 2 files" in err
    assert list_keys(s3_server, f"{grant['prefix']}model/") == []  # only after an exit 0
    assert_no_credentials(out + err, grant)


@pytest.mark.parametrize("exit_code", [0, 3])
def test_an_unreachable_s3_is_logged_and_never_changes_the_exit_code(
    tmp_path: Path, s3_server: S3Server, exit_code: int
) -> None:
    program = f"""
    import os, sys, time
    open(os.path.join(os.environ["CHECKPOINT_DIR"], "ckpt-1.index"), "wb").write(b"x")
    time.sleep(1.5)
    sys.exit({exit_code})
    """
    dirs = make_pod_dirs(tmp_path, program)
    grant = write_upload_json(s3_server, dirs, f"run-sync-down-{exit_code}")
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        grant["url"] = f"http://127.0.0.1:{closed.getsockname()[1]}/{s3_server.bucket}"
    (dirs["access"] / "upload.json").write_text(json.dumps(grant))
    proc = start_bootstrap(
        dirs, TFJOB_SYNC_CHECKPOINTS="1", TFJOB_CHECKPOINT_INTERVAL="0.3", TFJOB_UPLOAD_PATIENCE="1"
    )
    out, err = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == exit_code, err
    assert "tfjob-bootstrap: checkpoint sync failed: upload of" in err
    assert "tfjob-bootstrap: final checkpoint sync failed: upload of" in err
    assert "the next pass tries again" in err and "S3 keeps what earlier passes" in err
    assert "Traceback" not in err
    assert_no_credentials(out + err, grant)


def test_without_the_sync_setting_checkpoint_dir_exists_and_nothing_is_uploaded(
    tmp_path: Path, s3_server: S3Server
) -> None:
    program = """
    import os
    ckpt = os.environ["CHECKPOINT_DIR"]
    assert os.path.isdir(ckpt), ckpt
    open(os.path.join(ckpt, "checkpoint"), "w").write(ckpt)
    """
    dirs = make_pod_dirs(tmp_path, program)
    grant = write_upload_json(s3_server, dirs, "run-sync-off")
    proc = start_bootstrap(
        dirs, TFJOB_SYNC_CHECKPOINTS="0", TFJOB_CHECKPOINT_INTERVAL="0.1", TFJOB_UPLOAD_MODEL="1"
    )
    _, err = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == 0, err
    ckpt = dirs["workspace"] / "checkpoints"
    assert (ckpt / "checkpoint").read_text() == str(ckpt)
    assert list_keys(s3_server, f"{grant['prefix']}checkpoints/") == []
    assert "checkpoint sync" not in err


def test_a_checkpoint_interval_that_is_not_a_number_exits_2_before_the_program(
    tmp_path: Path,
) -> None:
    dirs = make_pod_dirs(tmp_path, "open('ran', 'w').close()\n")
    proc = start_bootstrap(dirs, TFJOB_SYNC_CHECKPOINTS="1", TFJOB_CHECKPOINT_INTERVAL="1m")
    _, err = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == 2
    assert "TFJOB_CHECKPOINT_INTERVAL: '1m' given; a number of seconds is required" in err
    assert not (dirs["workspace"] / "code" / "ran").exists()
