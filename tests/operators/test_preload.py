"""The preloads cover what a task process and the trigger runner import (operators/preload.py).

A module a step imports inside a function, left out of TASK_MODULES, is imported
again by every task process that runs the step: ~1 s each on a busy machine.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# The trigger runs in the triggerer, never in a task process the scheduler forks; it signs
# the pods' grants anew through grants.py.
TRIGGERER_MODULES = {"operators/triggers.py"}
TRIGGER_LATE_IMPORTERS = ("operators/triggers.py", "operators/grants.py")


def imported_in_functions(path: Path) -> set[str]:
    """Absolute modules imported inside functions of `path` (what a run of it imports late)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for inner in ast.walk(node):
            if isinstance(inner, ast.Import):
                found.update(alias.name for alias in inner.names)
            elif isinstance(inner, ast.ImportFrom) and inner.level == 0 and inner.module:
                found.add(inner.module)
    return found


def preloaded_modules(component: str = "scheduler") -> set[str]:
    """sys.modules of a fresh interpreter after preload_modules(component)."""
    code = (
        "import json, sys\n"
        "from operators.preload import preload_modules\n"
        f"preload_modules({component!r})\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_every_module_a_step_imports_late_is_preloaded():
    late = {
        module: str(path.relative_to(REPO))
        for path in sorted((REPO / "operators").glob("*.py"))
        if str(path.relative_to(REPO)) not in TRIGGERER_MODULES
        for module in imported_in_functions(path)
    }
    assert late, "operators/ imports nothing inside functions: the check has nothing to see"
    loaded = preloaded_modules()
    missing = {module: where for module, where in late.items() if module not in loaded}
    assert not missing, f"add to operators/preload.TASK_MODULES: {missing}"


def test_the_dag_files_imports_come_with_the_preload():
    loaded = preloaded_modules()
    for dag_file in sorted((REPO / "dags").glob("*.py")):
        tree = ast.parse(dag_file.read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                assert node.module in loaded, f"{dag_file.name} imports {node.module}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    assert alias.name in loaded, f"{dag_file.name} imports {alias.name}"


def test_every_module_the_trigger_imports_late_is_preloaded_in_the_triggerer():
    late = {
        module: importer
        for importer in TRIGGER_LATE_IMPORTERS
        for module in imported_in_functions(REPO / importer)
    }
    assert late, "the trigger imports nothing inside functions: the check has nothing to see"
    loaded = preloaded_modules("triggerer")
    missing = {module: where for module, where in late.items() if module not in loaded}
    assert not missing, f"add to operators/preload.TRIGGER_MODULES: {missing}"
