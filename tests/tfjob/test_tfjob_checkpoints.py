"""The pure part of checkpoints: which files a gang restores, the limits, the step."""

from __future__ import annotations

import pytest

from tfjob import checkpoints
from tfjob.checkpoints import (
    RestoreTooLarge,
    build_restore_document,
    find_pointer,
    parse_checkpoint_step,
    select_checkpoint_files,
)
from tfjob.runlayout import RunLayout

PREFIX = "out/runs/tfjob__d/r1/checkpoints/"


def test_the_checkpoints_prefix_sits_next_to_the_model():
    assert RunLayout.parse("s3://b/out/runs/tfjob__d/r1/").checkpoints.key == PREFIX
    assert RunLayout.parse("s3://b/out/runs/tfjob__d/r1").checkpoints.key == PREFIX


def test_files_are_selected_by_path_and_markers_and_unsafe_paths_left_out():
    listed = [
        (PREFIX + "ckpt-2.index", 10),
        (PREFIX + "checkpoint", 3),
        (PREFIX + "sub/", 0),
        (PREFIX + "a//b", 1),
        (PREFIX + "../escape", 1),
        (PREFIX + "sub/./x", 1),
        ("elsewhere/ckpt-1.index", 5),
        (PREFIX + "sub/ckpt-2.data-00000-of-00001", 7),
    ]
    files = select_checkpoint_files(listed, PREFIX)
    assert [(f.path, f.size) for f in files] == [
        ("checkpoint", 3),
        ("ckpt-2.index", 10),
        ("sub/ckpt-2.data-00000-of-00001", 7),
    ]
    assert find_pointer(files).key == PREFIX + "checkpoint"
    assert find_pointer(files[1:]) is None


def test_too_many_or_too_large_checkpoints_are_refused_naming_the_limits(monkeypatch):
    monkeypatch.setattr(checkpoints, "MAX_RESTORE_FILES", 2)
    with pytest.raises(RestoreTooLarge, match=r"3 files, 3 bytes; a gang restores at most 2 "):
        select_checkpoint_files([(PREFIX + f"f{i}", 1) for i in range(3)], PREFIX)
    monkeypatch.setattr(checkpoints, "MAX_RESTORE_BYTES", 100)
    with pytest.raises(RestoreTooLarge, match="max_to_keep"):
        select_checkpoint_files([(PREFIX + "big", 101)], PREFIX)


@pytest.mark.parametrize(
    ("text", "step"),
    [
        ('model_checkpoint_path: "ckpt-12"\nall_model_checkpoint_paths: "ckpt-11"\n', 12),
        ('model_checkpoint_path: "/tmp/x/model.ckpt-4500"\n', 4500),  # tf.compat.v1 Saver
        ('all_model_checkpoint_paths: "ckpt-3"\nmodel_checkpoint_path: "chief/ckpt-7"\n', 7),
        ('model_checkpoint_path: "final"\n', None),
        ("not a pointer", None),
        ("", None),
    ],
)
def test_the_step_is_the_number_ending_the_latest_checkpoints_name(text, step):
    assert parse_checkpoint_step(text) == step


def test_the_restore_document_lists_each_file_with_its_own_url():
    files = select_checkpoint_files(
        [(PREFIX + "checkpoint", 3), (PREFIX + "ckpt-1.index", 9)], PREFIX
    )
    urls = {PREFIX + "checkpoint": "http://s3/c?sig", PREFIX + "ckpt-1.index": "http://s3/i?sig"}
    assert build_restore_document("s3://b/" + PREFIX, 1, files, urls) == {
        "version": 1,
        "source": "s3://b/" + PREFIX,
        "step": 1,
        "files": [
            {"path": "checkpoint", "size": 3, "url": "http://s3/c?sig"},
            {"path": "ckpt-1.index", "size": 9, "url": "http://s3/i?sig"},
        ],
    }
