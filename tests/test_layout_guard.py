"""Guard: a run's S3 layout is spelled only in tfjob/runlayout.py.

The names under a run's prefix (`model/`, `checkpoints/`, `logs/`, `metrics.json`,
`run.json`, `bundle.tar.gz`) were spelled in several modules each and drifted;
`RunLayout` now names them. This test reads the source with `ast` (docstrings left
out) and fails naming each string literal that spells one as a key: the whole
literal, its start, or after a '/'. Prose that mentions a name (an error message's
"e.g. run.json") is not a key and passes.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
GUARDED_FOLDERS = ("operators", "runview", "tshell", "tenancy")
LAYOUT_NAMES = (
    "model/",
    "checkpoints/",
    "logs/",
    "tensorboard/",
    "metrics.json",
    "run.json",
    "bundle.tar.gz",
)
_NAME = "|".join(re.escape(name) for name in LAYOUT_NAMES)
_FOLDER = "|".join(re.escape(name[:-1]) for name in LAYOUT_NAMES if name.endswith("/"))
# A name at the literal's start or after a '/', or a folder ending it (`f"{prefix}/model"`).
LAYOUT_KEY = re.compile(rf"(?:^|/)(?:{_NAME})|/(?:{_FOLDER})$")
# Literals that spell a layout name but are no run key: (module, literal) -> why.
NOT_RUN_KEYS = {
    ("runview/api.py", "/runs/{dag_id}/{run_id}/logs/{replica}"): "the TFJob tab's log route",
    ("tshell/runs/failure.py", "/logs/"): "Airflow's REST route of a task's log",
    ("tshell/runs/logs.py", "/logs/"): "Airflow's REST route of a task's log",
}


def iter_docstrings(tree: ast.AST) -> Iterator[ast.AST]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                yield body[0].value


def find_layout_literals(source: str) -> Iterator[tuple[int, str]]:
    """(line, literal) of each string constant outside docstrings that spells a layout key."""
    tree = ast.parse(source)
    docstrings = {id(node) for node in iter_docstrings(tree)}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
            and LAYOUT_KEY.search(node.value)
        ):
            yield node.lineno, node.value


def find_guarded_literals() -> Iterator[tuple[str, int, str]]:
    for folder in GUARDED_FOLDERS:
        for path in sorted((REPO / folder).rglob("*.py")):
            relative = path.relative_to(REPO).as_posix()
            for line, literal in find_layout_literals(path.read_text(encoding="utf-8")):
                yield relative, line, literal


def test_no_module_outside_runlayout_spells_a_run_key():
    found = [
        f"{module}:{line}: {literal!r}"
        for module, line, literal in find_guarded_literals()
        if (module, literal) not in NOT_RUN_KEYS
    ]
    assert not found, (
        "a run's S3 keys are named by tfjob/runlayout.py (RunLayout, its constants); "
        "use them instead of:\n" + "\n".join(found)
    )


def test_every_literal_let_through_is_still_there():
    seen = {(module, literal) for module, _, literal in find_guarded_literals()}
    assert set(NOT_RUN_KEYS) <= seen, sorted(set(NOT_RUN_KEYS) - seen)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ('key = prefix + "model/"', ["model/"]),
        ('uri = f"{run}/logs/{role}-{index}.log"', ["/logs/"]),
        ('name = "metrics.json"', ["metrics.json"]),
        ('path = "logs/worker-0.log"', ["logs/worker-0.log"]),
        ('"""A docstring naming run.json and model/."""', []),
        ('def f():\n    """Writes <prefix>/run.json."""\n    return 1', []),
        ('message = "e.g. run.json, or a model"', []),
        ('uri = f"{run_prefix}/model"', ["/model"]),
        ('summary = {"model": 1, "logs": []}', []),
        ('name = "model-notes.txt"', []),
        ('name = "mymodel/"', []),
    ],
)
def test_the_guard_finds_keys_and_leaves_prose_and_docstrings(source, expected):
    assert [literal for _, literal in find_layout_literals(source)] == expected
