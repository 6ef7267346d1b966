"""localkube's `--forward PORT[=ADDRESS:PORT]`: parsing, what `up` records, and the modes of the
files holding the cluster's credentials (kubeconfig, the store with every Secret)."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from harness.localkube_fixtures import start_localkube, stop_localkube
from localkube.cli import build_parser
from localkube.forwarding import Forward, forwards_of_cluster, merge_forwards, parse_forward_spec


def test_a_plain_port_is_relayed_to_the_same_port_on_the_hosts_loopback():
    assert parse_forward_spec("9000") == Forward(9000, "127.0.0.1", 9000)
    assert parse_forward_spec("9000").spec() == "9000"


def test_a_port_can_be_relayed_to_another_loopback_address_and_port():
    forward = parse_forward_spec("9000=127.0.0.2:9001")
    assert (forward.pod_port, forward.host_address, forward.host_port) == (9000, "127.0.0.2", 9001)
    assert forward.spec() == "9000=127.0.0.2:9001"
    assert Forward.from_json(forward.to_json()) == forward


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("http", "expected PORT or PORT=ADDRESS:PORT"),
        ("70000", "a port 1..65535 is required"),
        ("9000=127.0.0.2", "the target needs an address and a port"),
        ("9000=10.0.0.1:9000", "an IPv4 loopback address (127.0.0.0/8) is required"),
        ("9000=localhost:9000", "an IPv4 loopback address"),
        ("9000=127.0.0.2:0", "a port 1..65535 is required"),
    ],
)
def test_bad_forward_specs_are_refused_with_the_expected_form(spec, says):
    with pytest.raises(ValueError, match="9000=127.0.0.2:9000") as caught:
        parse_forward_spec(spec)
    assert says in str(caught.value)


def test_the_cli_accepts_both_forms_and_names_a_bad_one(capsys):
    args = build_parser().parse_args(["up", "--forward", "9000=127.0.0.2:9000", "8080"])
    assert args.forward == [Forward(9000, "127.0.0.2", 9000), Forward(8080)]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["up", "--forward", "9000=8.8.8.8:53"])
    assert "an IPv4 loopback address" in capsys.readouterr().err


def test_one_pod_port_cannot_go_to_two_targets():
    merged = merge_forwards([Forward(9000), Forward(80), Forward(9000)])
    assert merged == [Forward(80), Forward(9000)]
    with pytest.raises(ValueError, match="pod port 9000 given twice"):
        merge_forwards([Forward(9000), parse_forward_spec("9000=127.0.0.2:9000")])


def test_the_kubelet_reads_forwards_and_older_files_with_ports_only():
    new = {"forwards": [{"pod_port": 9000, "host": "127.0.0.2", "host_port": 9000}]}
    assert forwards_of_cluster(new, 6443) == [Forward(6443), Forward(9000, "127.0.0.2", 9000)]
    assert forwards_of_cluster({"forward_ports": [9000, 6443]}, 6443) == [
        Forward(6443),
        Forward(9000),
    ]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_up_records_the_forwards_and_keeps_credentials_private(tmp_path):
    handle = start_localkube(tmp_path, kubelets=False, forward_ports=("9000=127.0.0.2:9001",))
    state_dir = Path(handle.state_dir)
    try:
        info = json.loads((state_dir / "localkube.json").read_text())
        api_port = int(handle.api_url.rsplit(":", 1)[1])
        assert info["forward_ports"] == sorted({9000, api_port})
        assert {"pod_port": 9000, "host": "127.0.0.2", "host_port": 9001} in info["forwards"]
        assert {"pod_port": api_port, "host": "127.0.0.1", "host_port": api_port} in info[
            "forwards"
        ]
        handle.request(
            "POST",
            "/api/v1/namespaces/default/secrets",
            {"metadata": {"name": "s"}, "stringData": {"k": "v"}},
        )
        assert mode(state_dir) == 0o700
        for name in ("kubeconfig", "localkube.json", "store.db", "store.db-wal", "store.db-shm"):
            assert mode(state_dir / name) == 0o600, name
    finally:
        stop_localkube(handle)
