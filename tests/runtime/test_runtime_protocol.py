"""The pod protocol's names live in runtime/protocol.py only, and the pod can import them.

The manifests, the operators, tshell and the runtime scripts meet on these names; a
copy elsewhere would drift (the container name was once defined in three modules).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys

from harness.repo_root import REPO_ROOT
from harness.tfjob_fixtures import RUN, distributed_request_data
from runtime import protocol
from tfjob.manifests import build_pod_manifests
from tfjob.request.model import load_request

REPO = REPO_ROOT
PROTOCOL = REPO / "runtime" / "protocol.py"
# String literals that are pod-protocol names: container names, mount paths, the entry
# modules, TFJOB_* variables the pods read. Documentation (docstrings, comments) may name them.
PROTOCOL_LITERAL = re.compile(
    r"^(tensorflow|fetch-bundle|tfjob-keeper|/tfjob/(python|runtime|access|workspace|config)\b.*"
    r"|runtime\.(fetch|bootstrap|keeper)"
    r"|TFJOB_(ROLE|INDEX|WAIT_CLUSTERSPEC|CLUSTERSPEC_TIMEOUT|UPLOAD_MODEL|UPLOAD_PATIENCE"
    r"|SYNC_CHECKPOINTS|CHECKPOINT_INTERVAL|WORKSPACE|CONFIG_DIR|ACCESS_DIR|MAX_BUNDLE_BYTES"
    r"|MAX_BUNDLE_COMPRESSED_BYTES|MAX_RESTORE_FILES|MAX_RESTORE_BYTES|METRICS?) ?)$"
)
PRODUCT_FOLDERS = ("operators", "tfjob", "tshell", "runtime", "dags", "plugins", "bench")


def docstring_nodes(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def test_no_module_but_protocol_spells_a_pod_protocol_name():
    copies = []
    for folder in PRODUCT_FOLDERS:
        for path in sorted((REPO / folder).rglob("*.py")):
            if path == PROTOCOL:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            docs = docstring_nodes(tree)
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Constant)
                    and isinstance(node.value, str)
                    and id(node) not in docs
                    and PROTOCOL_LITERAL.match(node.value)
                ):
                    copies.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.value!r}")
    assert not copies, "import these from runtime/protocol.py:\n" + "\n".join(copies)


def test_protocol_imports_nothing_so_it_ships_alone_to_pods():
    tree = ast.parse(PROTOCOL.read_text(encoding="utf-8"))
    imports = [node for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom)]
    assert imports == []


def test_the_runtime_scripts_import_the_protocol_from_the_package_as_in_a_pod(tmp_path):
    # The runtime package below the working directory, as the pod's PACKAGE_ROOT holds it.
    (tmp_path / "runtime").mkdir()
    for path in (REPO / "runtime").glob("*.py"):
        (tmp_path / "runtime" / path.name).write_text(path.read_text(encoding="utf-8"))
    code = (
        "import runtime, runtime.bootstrap as bootstrap, runtime.fetch, runtime.protocol; "
        "import runtime.keeper as keeper, runtime.metric_lines as metric_lines; "
        "import runtime.checkpoints as checkpoints; "
        "assert runtime.__file__.startswith(sys.argv[1]), runtime.__file__; "
        "print(keeper.EXIT_KEEPER_REFUSED, bootstrap.EXIT_UPLOAD_FAILED, "
        "metric_lines.METRIC_MARKER.strip(), checkpoints.RESTORE_FILE)"
    )
    done = subprocess.run(
        [sys.executable, "-s", "-E", "-c", "import sys; " + code, str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["77", "74", "TFJOB_METRIC", "restore.json"]


def test_the_manifests_build_pods_from_the_protocols_names():
    pods = build_pod_manifests(load_request(distributed_request_data()), RUN)
    owner = next(
        pod
        for pod in pods
        if any(c["name"] == protocol.KEEPER_CONTAINER for c in pod["spec"]["containers"])
    )
    init = owner["spec"]["initContainers"][0]
    main, keeper = owner["spec"]["containers"]
    assert (init["name"], main["name"]) == (protocol.INIT_CONTAINER, protocol.MAIN_CONTAINER)
    assert init["command"] == list(protocol.FETCH_COMMAND)
    assert main["command"][:3] == list(protocol.BOOTSTRAP_COMMAND)
    assert keeper["command"] == list(protocol.KEEPER_COMMAND)
    assert {c["workingDir"] for c in (init, main, keeper)} == {protocol.PACKAGE_ROOT}
    mounts = {m["mountPath"] for m in main["volumeMounts"]}
    assert {
        protocol.RUNTIME_DIR,
        protocol.ACCESS_DIR,
        protocol.WORKSPACE_DIR,
        protocol.CONFIG_DIR,
    } <= mounts
    env = {item["name"] for item in main["env"]}
    assert {
        protocol.ENV_ROLE,
        protocol.ENV_INDEX,
        protocol.ENV_WAIT_CLUSTERSPEC,
        protocol.ENV_CLUSTERSPEC_TIMEOUT,
        protocol.ENV_UPLOAD_MODEL,
        protocol.ENV_UPLOAD_PATIENCE,
        protocol.ENV_SYNC_CHECKPOINTS,
        protocol.ENV_CHECKPOINT_INTERVAL,
    } <= env
