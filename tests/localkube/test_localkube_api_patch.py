"""Patch formats and selectors as pure functions (no server)."""

from __future__ import annotations

import pytest

from localkube.apiserver.errors import ApiError
from localkube.apiserver.patch import json_patch, merge_patch, strategic_merge
from localkube.apiserver.quantity import format_like, parse_quantity
from localkube.apiserver.selectors import (
    fields_match,
    labels_match,
    parse_field_selector,
    parse_label_selector,
)

POD = {
    "spec": {
        "containers": [
            {
                "name": "a",
                "image": "x",
                "env": [{"name": "K", "value": "1"}],
                "volumeMounts": [{"name": "v", "mountPath": "/data"}],
                "ports": [{"containerPort": 80}],
            },
            {"name": "b", "image": "y"},
        ],
        "volumes": [{"name": "v", "emptyDir": {}}],
    },
    "status": {
        "conditions": [
            {"type": "Ready", "status": "False"},
            {"type": "PodScheduled", "status": "True"},
        ]
    },
}


def test_strategic_merge_uses_the_patch_merge_keys():
    patched = strategic_merge(
        POD,
        {
            "spec": {
                "containers": [
                    {
                        "name": "a",
                        "env": [{"name": "N", "value": "2"}],
                        "volumeMounts": [{"name": "w", "mountPath": "/other"}],
                        "ports": [{"containerPort": 80, "name": "http"}],
                    }
                ],
                "volumes": [{"name": "w", "emptyDir": {}}],
            },
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        },
    )
    a = patched["spec"]["containers"][0]
    assert [e["name"] for e in a["env"]] == ["K", "N"]
    assert [m["mountPath"] for m in a["volumeMounts"]] == ["/data", "/other"]
    assert a["ports"] == [{"containerPort": 80, "name": "http"}]
    assert [c["name"] for c in patched["spec"]["containers"]] == ["a", "b"]
    assert [v["name"] for v in patched["spec"]["volumes"]] == ["v", "w"]
    assert patched["status"]["conditions"] == [
        {"type": "Ready", "status": "True"},
        {"type": "PodScheduled", "status": "True"},
    ]


def test_strategic_merge_directives():
    deleted = strategic_merge(POD, {"spec": {"containers": [{"name": "b", "$patch": "delete"}]}})
    assert [c["name"] for c in deleted["spec"]["containers"]] == ["a"]
    replaced = strategic_merge(POD, {"spec": {"$patch": "replace", "containers": []}})
    assert replaced["spec"] == {"containers": []}
    assert "status" not in strategic_merge(POD, {"status": None})


def test_merge_patch_replaces_lists_and_deletes_nulls():
    patched = merge_patch(POD, {"spec": {"containers": [{"name": "z"}], "volumes": None}})
    assert patched["spec"] == {"containers": [{"name": "z"}]}


def test_json_patch_operations_and_errors():
    doc = {"a": {"b": [1, 2]}}
    assert json_patch(
        doc,
        [
            {"op": "add", "path": "/a/b/1", "value": 9},
            {"op": "add", "path": "/a/b/-", "value": 3},
            {"op": "replace", "path": "/a/b/0", "value": 0},
        ],
    ) == {"a": {"b": [0, 9, 2, 3]}}
    with pytest.raises(ApiError):
        json_patch(doc, [{"op": "replace", "path": "/a/c", "value": 1}])
    assert json_patch(doc, [{"op": "move", "from": "/a/b", "path": "/c"}]) == {"a": {}, "c": [1, 2]}
    with pytest.raises(ApiError) as error:
        json_patch(doc, [{"op": "remove", "path": "/nope"}])
    assert error.value.code == 422
    with pytest.raises(ApiError):
        json_patch(doc, [{"op": "test", "path": "/a/b/0", "value": 5}])


@pytest.mark.parametrize(
    "text, labels, expected",
    [
        ("a=1,b!=2", {"a": "1", "b": "3"}, True),
        ("a in (1, 2),!c", {"a": "2"}, True),
        ("a notin (1)", {}, True),
        ("a", {}, False),
        ("environment in (production, qa),tier notin (frontend)", {"environment": "qa"}, True),
    ],
)
def test_label_selector_forms(text, labels, expected):
    assert labels_match(parse_label_selector(text), labels) is expected


def test_field_selector_missing_field_is_empty_string():
    terms = parse_field_selector("spec.nodeName=,status.phase!=Failed")
    assert fields_match(terms, {"spec": {}, "status": {"phase": "Pending"}})
    assert not fields_match(terms, {"spec": {"nodeName": "n"}, "status": {}})


def test_quantities_compare_exactly_and_format_canonically():
    assert parse_quantity("0.1") + parse_quantity("200m") == parse_quantity("300m")
    assert parse_quantity("1Gi") == parse_quantity("1024Mi")
    assert format_like("requests.memory", parse_quantity("1536Mi")) == "1536Mi"
    assert format_like("requests.cpu", parse_quantity("1.5")) == "1500m"
    with pytest.raises(ValueError, match="quantity '2X' is not valid"):
        parse_quantity("2X")


def test_strategic_merge_unions_finalizers():
    patched = strategic_merge(
        {"metadata": {"finalizers": ["a"]}}, {"metadata": {"finalizers": ["b", "a"]}}
    )
    assert patched["metadata"]["finalizers"] == ["a", "b"]
    removed = strategic_merge(patched, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}})
    assert removed["metadata"]["finalizers"] == ["b"]
