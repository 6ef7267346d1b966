"""The RBAC the Airflow side needs (deploy/rbac/) is valid and covers what the pipeline calls."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

RBAC = Path(__file__).resolve().parent.parent / "deploy" / "rbac"
KUBERNETES_VERSION = kubernetes_validate.utils.latest_version()


@pytest.mark.parametrize("path", sorted(RBAC.glob("*.yaml")), ids=lambda p: p.name)
def test_every_rbac_manifest_validates_against_the_kubernetes_schema(path):
    for manifest in yaml.safe_load_all(path.read_text()):
        kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)


def test_the_role_grants_every_verb_the_pipeline_uses():
    role = yaml.safe_load((RBAC / "clusterrole.yaml").read_text())
    granted = {(r, v) for rule in role["rules"] for r in rule["resources"] for v in rule["verbs"]}
    needed = {
        ("pods", "create"),
        ("pods", "list"),
        ("pods", "watch"),
        ("pods", "delete"),
        ("pods/log", "get"),
        ("pods/exec", "create"),
        ("configmaps", "create"),
        ("configmaps", "delete"),
        ("secrets", "create"),
        ("secrets", "delete"),
        ("events", "list"),
    }
    assert needed <= granted
