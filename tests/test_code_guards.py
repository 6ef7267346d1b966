"""Guards on the code's shape: module size, the direction of imports, no import circles.

docs/architecture.md ("Packages and the direction of imports") fixes which
package may import which; DEVELOPERS.md keeps every module at most 500 lines.
Nothing enforced either, so both drifted before (a 874-line tshell module, an
agent/podworker/recovery circle in localkube's kubelet). These tests read the
source with `ast` (nothing is imported) and fail naming each offender.
Imports inside functions count too: a lazy import that dodges a circle is
still a circle in the design.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
MAX_MODULE_LINES = 500
# Which first-party packages each package may import (docs/architecture.md).
ALLOWED_IMPORTS = {
    "runtime": {"runtime"},
    "tfjob": {"tfjob", "runtime"},
    "tenancy": {"tenancy", "tfjob", "runtime"},
    "operators": {"operators", "tenancy", "tfjob", "runtime"},
    "runview": {"runview", "operators", "tenancy", "tfjob", "runtime"},
    "dags": {"operators", "tenancy", "tfjob", "runtime"},
    "plugins": {"runview", "operators", "tenancy", "tfjob", "runtime"},
    "tshell": {"tshell", "tenancy", "tfjob", "runtime"},
    "localkube": {"localkube"},
    # The test harness (localkube, S3, Airflow worlds): tests and bench import it, the
    # product never does.
    "harness": {"harness", "tenancy", "tfjob", "runtime"},
}
FIRST_PARTY = set(ALLOWED_IMPORTS)
ALLOWED_MODULES: dict[str, set[str]] = {}
# Sized like the product: the embedded services and the benchmarks are code people carry on.
SIZED_FOLDERS = (*ALLOWED_IMPORTS, "scripts", "bench")


def iter_modules(folders: tuple[str, ...]) -> Iterator[Path]:
    for folder in folders:
        yield from sorted(p for p in (REPO / folder).rglob("*.py") if "__pycache__" not in p.parts)


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path) -> Iterator[tuple[int, str]]:
    """(line, dotted name) of every import in the file, relative ones resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = (
        module_name(path).rsplit(".", 1)[0] if path.name != "__init__.py" else module_name(path)
    )
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            yield node.lineno, base
            for alias in node.names:  # `from pkg import module` imports pkg.module
                yield node.lineno, f"{base}.{alias.name}"


def first_party_target(name: str) -> str | None:
    top = name.split(".")[0]
    return top if top in FIRST_PARTY else None


def test_no_module_is_over_500_lines():
    over = [
        f"{path.relative_to(REPO)}: {count} lines"
        for path in iter_modules(SIZED_FOLDERS)
        if (count := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    ]
    assert not over, f"split along their seams (at most {MAX_MODULE_LINES} lines): {over}"


def test_imports_go_only_the_way_docs_architecture_draws_them():
    wrong = []
    for path in iter_modules(tuple(ALLOWED_IMPORTS)):
        importer = path.relative_to(REPO).parts[0]
        for line, name in imported_modules(path):
            target = first_party_target(name)
            allowed = ALLOWED_MODULES.get(importer, set())
            if any(name == module or name.startswith(f"{module}.") for module in allowed):
                continue
            if target is not None and target not in ALLOWED_IMPORTS[importer]:
                wrong.append(f"{path.relative_to(REPO)}:{line} imports {name}")
    assert not wrong, "imports against docs/architecture.md:\n" + "\n".join(sorted(set(wrong)))


def test_the_runtime_imports_only_the_standard_library_and_itself_as_a_package():
    # Pods run `python3 -m runtime.<entry>` with the package alone on their path.
    wrong = [
        f"{path.relative_to(REPO)}:{line} imports {name}"
        for path in iter_modules(("runtime",))
        for line, name in imported_modules(path)
        if name.split(".")[0] not in {"runtime", *sys.stdlib_module_names}
    ]
    assert not wrong, "the pod has no such module:\n" + "\n".join(sorted(set(wrong)))


def build_import_graph() -> dict[str, set[str]]:
    modules = {module_name(path): path for path in iter_modules(tuple(ALLOWED_IMPORTS))}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for _, imported in imported_modules(path):
            if imported in modules and imported != name:
                graph[name].add(imported)
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


# Scripts the kubelet runs as `python -I -S <file>` (isolated from the host's environment,
# no site: the venv's editable install is not there), which find localkube by their path.
SYS_PATH_EDITS_ALLOWED = {
    "localkube/kubelet/shim.py",
    "localkube/kubelet/enter.py",
    "tests/conftest.py",
}
SYS_PATH_FOLDERS = (*ALLOWED_IMPORTS, "scripts", "bench", "tests")


def edits_sys_path(node: ast.AST) -> bool:
    """`sys.path.insert(...)`, `.append`, `.extend`, `.remove`, or an assignment to it."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        target = node.func.value
    elif isinstance(node, (ast.Assign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return any(ast.unparse(t).startswith("sys.path") for t in targets)
    else:
        return False
    return ast.unparse(target) == "sys.path" and node.func.attr in {
        "insert",
        "append",
        "extend",
        "remove",
    }


def test_nothing_edits_sys_path_but_the_tests_conftest():
    """Every package is installed (editable), scripts/ and bench/ included, so imports name
    packages; a child program's source held in a string is not read."""
    edits = [
        f"{path.relative_to(REPO)}:{node.lineno}"
        for path in iter_modules(SYS_PATH_FOLDERS)
        if str(path.relative_to(REPO)) not in SYS_PATH_EDITS_ALLOWED
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path)))
        if edits_sys_path(node)
    ]
    assert not edits, "import by package name instead of editing sys.path: " + ", ".join(edits)


def test_no_import_circle_among_the_product_modules():
    cycles = find_cycles(build_import_graph())
    assert not cycles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


@pytest.mark.parametrize(
    "graph, expected",
    [
        ({"a": {"b"}, "b": {"a"}, "c": set()}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
    ],
)
def test_the_circle_finder_finds_circles_and_only_circles(graph, expected):
    assert find_cycles(graph) == expected


# Imports sit at module top. A function may import, when it runs, only what is named here:
# heavy third-party modules, each with the price its laziness avoids (issue 28 item 7).
LAZY_IMPORTS = {
    "airflow": "Airflow's models, hooks, providers and API server: tshell and tenancy's "
    "scripts run without Airflow, the plugin is loaded by every Airflow process, and S3Hook "
    "would bring boto3 into every DAG parse",
    "airflow_client": "the Airflow REST client: `tshell --help` imports every command module",
    "kubernetes": "the Kubernetes client (about 1 s): `tshell --help` (tshell imports tenancy) "
    "and S3-only commands",
    "kubernetes_asyncio": "the asyncio Kubernetes client: only the trigger uses it",
    "boto3": "the AWS SDK (about 0.3 s): only S3 work uses it",
    "botocore": "the AWS SDK (about 0.3 s): only S3 work uses it",
    "s3transfer": "the AWS SDK's transfer manager: only uploads use it",
    "sqlalchemy": "Airflow's database layer: imported with Airflow's models",
    "urllib3": "the HTTP layer of the Kubernetes and Airflow clients: imported with them",
    "aiohttp": "an optional transport: transient.py recognises its errors when it is installed",
    "websocket": "an optional transport: transient.py recognises its errors when it is installed",
    "asgiref": "Airflow's sync-to-async bridge: only the trigger uses it",
    "werkzeug": "FAB's password hashing: imported with Airflow's FAB provider",
    "tensorboard": "the event files' protos (about 0.05 s): every Airflow process loads the "
    "plugin, only the API server reads curves (runview/eventfiles.py)",
    "fastapi": "the web framework (about 0.25 s, Airflow's API server 1.3 s more): every Airflow "
    "process loads the plugin, only the API server builds the app (runview/api.py)",
}
TOP_IMPORT_FOLDERS = ("operators", "tenancy", "runview", "tfjob", "tshell", "dags", "plugins")


def is_named(module: str, names: Iterable[str]) -> bool:
    return any(module == name or module.startswith(f"{name}.") for name in names)


def function_level_imports(path: Path) -> Iterator[tuple[int, str]]:
    """(line, module) of every import inside a function, relative ones resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = (
        module_name(path) if path.name == "__init__.py" else module_name(path).rsplit(".", 1)[0]
    )
    seen = set()
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(function):
            if node in seen or not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            seen.add(node)
            if isinstance(node, ast.Import):
                yield from ((node.lineno, alias.name) for alias in node.names)
            elif node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                yield node.lineno, ".".join([*anchor, node.module] if node.module else anchor)
            else:
                yield node.lineno, node.module or ""


def test_functions_import_only_the_named_heavy_modules():
    """No function imports the project's own modules; only LAZY_IMPORTS' third-party ones."""
    lazy = [
        f"{path.relative_to(REPO)}:{line} imports {name}"
        for path in iter_modules(TOP_IMPORT_FOLDERS)
        for line, name in function_level_imports(path)
        if first_party_target(name) is not None or not is_named(name, LAZY_IMPORTS)
    ]
    assert not lazy, (
        "import at module top (or name the module in LAZY_IMPORTS, with why):\n" + "\n".join(lazy)
    )


def test_the_lazy_import_lists_name_only_what_is_imported_lazily():
    used = {
        name
        for path in iter_modules(TOP_IMPORT_FOLDERS)
        for _, name in function_level_imports(path)
    }
    stale = [name for name in LAZY_IMPORTS if not any(is_named(n, [name]) for n in used)]
    assert not stale, f"no function imports these any more: {stale}"


# `Any` says nothing about a value: JSON is `JsonObject` (tfjob/jsontypes.py), a value
# that crosses a package is a record (tfjob/records/), what anything may be is `object`.
# The records take and return no Any at all, nor do the public functions of every module
# another package imports (ANY_IN_SIGNATURE_ALLOWED names the exceptions, with why); elsewhere
# a budget (Done-when of issue 28), counted as `grep -ow Any` counts (imports and docstrings
# included). runview's routes keep `dict[str, Any]`: FastAPI reads a route's annotations (the
# return type is its response model).
ANY_PER_1000_LINES = {
    "operators": 10,
    "runview": 10,
    "tenancy": 10,
    "tfjob": 10,
    "tshell": 10,
}
NO_ANY_IN_SIGNATURES = ("tfjob/records",)
# Packages whose modules other packages import (scripts/ and bench/ import them too); the test
# harness is not the product and is left out.
TYPED_ACROSS_FOLDERS = (
    "runtime",
    "tfjob",
    "tenancy",
    "operators",
    "runview",
    "tshell",
    "dags",
    "plugins",
    "localkube",
)
TYPED_ACROSS_IMPORTERS = (*ALLOWED_IMPORTS, "scripts", "bench")
# Public functions that may keep Any in their signature, each with why.
ANY_IN_SIGNATURE_ALLOWED = {
    f"runview/api.py {route}": "a FastAPI route: FastAPI reads its annotations at run time "
    "(the return type is its response model, the OpenAPI document)"
    for route in ("get_run", "get_curves", "get_log", "post_cancel", "list_files")
}


def count_any(folder: str) -> tuple[int, int]:
    """(occurrences of the word Any, lines) over the folder's modules."""
    words = lines = 0
    for path in iter_modules((folder,)):
        text = path.read_text(encoding="utf-8")
        words += len(re.findall(r"\bAny\b", text))
        lines += len(text.splitlines())
    return words, lines


def test_any_stays_within_its_budget_per_1000_lines():
    over = []
    for folder, budget in ANY_PER_1000_LINES.items():
        words, lines = count_any(folder)
        if words * 1000 > budget * lines:
            over.append(f"{folder}/: {words} Any in {lines} lines (at most {budget} per 1,000)")
    assert not over, "name the type (JsonObject, a record, object):\n" + "\n".join(over)


def any_in_signature(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    arguments = function.args
    annotations = [
        a.annotation
        for a in (
            *arguments.posonlyargs,
            *arguments.args,
            *arguments.kwonlyargs,
            arguments.vararg,
            arguments.kwarg,
        )
        if a is not None and a.annotation is not None
    ]
    if function.returns is not None:
        annotations.append(function.returns)
    return any(re.search(r"\bAny\b", ast.unparse(a)) for a in annotations)


def iter_functions(path: Path) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def modules_other_packages_import() -> set[str]:
    """Dotted names of the first-party modules a module of another package imports, and
    the modules of their package that an imported package's `__init__` re-exports."""
    imported = {
        name
        for path in iter_modules(TYPED_ACROSS_IMPORTERS)
        for _, name in imported_modules(path)
        if first_party_target(name) not in (None, path.relative_to(REPO).parts[0])
    }
    for path in iter_modules(TYPED_ACROSS_FOLDERS):
        package = module_name(path)
        if path.name == "__init__.py" and package in imported:
            imported.update(n for _, n in imported_modules(path) if n.startswith(f"{package}."))
    return imported


def test_records_take_and_return_no_any():
    found = [
        f"{path.relative_to(REPO)}:{function.lineno} {function.name}"
        for path in iter_modules(NO_ANY_IN_SIGNATURES)
        for function in iter_functions(path)
        if any_in_signature(function)
    ]
    assert not found, "Any in a record's signature:\n" + "\n".join(found)


def test_public_functions_of_modules_other_packages_import_take_and_return_no_any():
    """What crosses a package is a record (tfjob/records/) or a precise type (issue 28)."""
    imported = modules_other_packages_import()
    found = [
        f"{path.relative_to(REPO)}:{function.lineno} {function.name}"
        for path in iter_modules(TYPED_ACROSS_FOLDERS)
        if module_name(path) in imported
        for function in iter_functions(path)
        if not function.name.startswith("_")
        and any_in_signature(function)
        and f"{path.relative_to(REPO)} {function.name}" not in ANY_IN_SIGNATURE_ALLOWED
    ]
    assert not found, (
        "name the type (a record of tfjob/records/, JsonObject, Mapping[str, object], "
        "object):\n" + "\n".join(found)
    )


def test_the_any_allow_list_names_only_functions_with_any():
    have = {
        f"{path.relative_to(REPO)} {function.name}"
        for path in iter_modules(TYPED_ACROSS_FOLDERS)
        for function in iter_functions(path)
        if any_in_signature(function)
    }
    assert set(ANY_IN_SIGNATURE_ALLOWED) <= have, set(ANY_IN_SIGNATURE_ALLOWED) - have


# Folders whose every module docs/architecture.md lists, each under its folder's own line
# ("`tfjob/`" or "### ... (`localkube/kubelet/`)") in "## Modules of each package".
LISTED_FOLDERS = (
    "tfjob",
    "tfjob/request",
    "tfjob/records",
    "tfjob/tenants",
    "tfjob/kubeflow",
    "runtime",
    "tenancy",
    "operators",
    "runview",
    "tshell",
    "tshell/runs",
    "dags",
    "plugins",
    "localkube",
    "localkube/apiserver",
    "localkube/hollow",
    "localkube/kubelet",
)


def read_module_lists(text: str) -> dict[str, set[str]]:
    """{folder: the `*.py` names its block of the modules section mentions}."""
    section = text.split("## Modules of each package", 1)[1].split("\n## ", 1)[0]
    blocks: dict[str, set[str]] = {}
    folder = None
    for line in section.splitlines():
        heading = line.startswith("`") or line.startswith("### ")
        named = [part for part in line.split("`")[1::2] if part.endswith("/")]
        if heading and named:
            folder = named[0].rstrip("/")
            blocks.setdefault(folder, set())
        elif folder is not None:
            blocks[folder].update(p for p in line.split("`")[1::2] if p.endswith(".py"))
    return blocks


def test_docs_architecture_lists_every_module_under_its_folder():
    blocks = read_module_lists((REPO / "docs" / "architecture.md").read_text(encoding="utf-8"))
    missing = [
        f"{folder}/{path.name}"
        for folder in LISTED_FOLDERS
        for path in sorted((REPO / folder).glob("*.py"))
        if path.name != "__init__.py" and path.name not in blocks.get(folder, set())
    ]
    assert not missing, "docs/architecture.md names no line for: " + ", ".join(missing)


def test_the_module_list_reader_keeps_each_folder_apart():
    text = (
        "## Modules of each package\n`a/`\n- `x.py`: x\n### b (`a/b/`)\n- `y.py`\n## Next\n`z.py`"
    )
    assert read_module_lists(text) == {"a": {"x.py"}, "a/b": {"y.py"}}
