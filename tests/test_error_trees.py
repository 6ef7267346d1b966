"""Each package's errors hang under its one base, and its docstring draws every one of them.

tfjob, runtime, operators, tenancy, runview and tshell each have one base error (their `errors.py`)
and draw the tree in their `__init__.py`, as httpx's `_exceptions.py` does. A new
exception class that skips the base, or is missing from the drawing, fails here.
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BASES = {
    "tfjob": "TfjobError",
    "runtime": "PodError",
    "operators": "PipelineError",
    "tshell": "TshellError",
    "tenancy": "TenancyError",
    "runview": "RunViewError",
}
# Documented in the package docstrings as outside the tree, with the reason there.
OUTSIDE = {"runtime.checkpoint_sync.PassStopped"}


def imported_exception_classes(package: str) -> list[type[BaseException]]:
    classes = []
    for path in sorted((REPO / package).rglob("*.py")):
        if path.stem in {"__init__", "__main__"} or "__pycache__" in path.parts:
            continue
        dotted = ".".join(path.relative_to(REPO).with_suffix("").parts)
        module = importlib.import_module(dotted)
        classes += [
            value
            for _, value in inspect.getmembers(module, inspect.isclass)
            if issubclass(value, BaseException) and value.__module__ == module.__name__
        ]
    return classes


@pytest.mark.parametrize(
    "package", ["tfjob", "runtime", "operators", "tshell", "tenancy", "runview"]
)
def test_every_error_of_the_package_has_its_base_and_is_drawn(package):
    base = getattr(importlib.import_module(f"{package}.errors"), BASES[package])
    drawing = importlib.import_module(package).__doc__ or ""
    classes = [
        c
        for c in imported_exception_classes(package)
        if f"{c.__module__}.{c.__name__}" not in OUTSIDE and c is not base
    ]
    assert classes, "no errors found: the test reads the wrong place"
    outside = [c.__qualname__ for c in classes if not issubclass(c, base)]
    assert not outside, f"re-base these on {base.__name__}: {outside}"
    undrawn = [c.__name__ for c in classes if c.__name__ not in drawing]
    assert not undrawn, f"draw these in {package}/__init__.py's tree: {undrawn}"


def test_errors_keep_the_python_and_airflow_bases_their_callers_catch():
    from airflow.sdk.exceptions import AirflowException, AirflowFailException

    from operators.bundlecheck import BundleMissing
    from operators.gang import GangStartError
    from operators.train import TrainingFailed
    from runtime.bundleformat import BundleError
    from runtime.errors import PodError
    from tfjob.request.errors import RequestError
    from tshell.config import ConfigError

    assert issubclass(RequestError, ValueError) and issubclass(ConfigError, ValueError)
    assert issubclass(GangStartError, AirflowException)
    assert issubclass(TrainingFailed, AirflowFailException)
    assert issubclass(BundleMissing, FileNotFoundError)
    assert issubclass(BundleError, PodError)
