"""Port forwards into pods: which pod port is relayed to which host address and port.

`--forward 9000` relays every pod's 127.0.0.1:9000 to the host's 127.0.0.1:9000;
`--forward 9000=127.0.0.2:9001` relays it to the host's 127.0.0.2:9001 instead,
so a host service can give pods a listener of their own (with other rules)
while the URLs pods are handed keep naming 127.0.0.1:9000. A TCP relay leaves
the bytes alone: the pod's requests still carry `Host: 127.0.0.1:9000`.

Targets are IPv4 loopback addresses only (127.0.0.0/8): the kubelet relays
into this machine, never beyond it. `up` records the forwards in
DIR/localkube.json as `forwards` (and their pod ports as `forward_ports`);
the kubelets read them from there.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class Forward:
    """The pod's 127.0.0.1:pod_port relayed to the host's host_address:host_port."""

    pod_port: int
    host_address: str = LOOPBACK
    host_port: int = None  # type: ignore[assignment]  # None: the same as pod_port

    def __post_init__(self) -> None:
        if self.host_port is None:
            object.__setattr__(self, "host_port", self.pod_port)
        for name in ("pod_port", "host_port"):
            value = getattr(self, name)
            if not isinstance(value, int) or not 1 <= value <= 65535:
                raise ValueError(f"forward {name}: {value!r} given; a port 1..65535 is required")
        try:
            address = ipaddress.ip_address(self.host_address)
        except ValueError:
            address = None
        if address is None or address.version != 4 or not address.is_loopback:
            raise ValueError(
                f"forward target address: {self.host_address!r} given; an IPv4 loopback "
                "address (127.0.0.0/8) is required"
            )

    def spec(self) -> str:
        """The `--forward` form: `9000`, or `9000=127.0.0.2:9001` for another target."""
        if (self.host_address, self.host_port) == (LOOPBACK, self.pod_port):
            return str(self.pod_port)
        return f"{self.pod_port}={self.host_address}:{self.host_port}"

    def to_json(self) -> dict:
        return {"pod_port": self.pod_port, "host": self.host_address, "host_port": self.host_port}

    @classmethod
    def from_json(cls, data: dict) -> Forward:
        return cls(int(data["pod_port"]), str(data["host"]), int(data["host_port"]))


def parse_forward_spec(text: str) -> Forward:
    """`PORT` or `PORT=ADDRESS:PORT`; ValueError naming the form otherwise."""
    pod, sep, target = str(text).strip().partition("=")
    address, colon, port = target.rpartition(":")
    try:
        if not sep:
            return Forward(int(pod))
        if not colon or not address:
            raise ValueError("the target needs an address and a port")
        return Forward(int(pod), address, int(port))
    except ValueError as error:
        raise ValueError(
            f"--forward: {text!r} given; expected PORT or PORT=ADDRESS:PORT "
            f"(e.g. 9000 or 9000=127.0.0.2:9000): {error}"
        ) from None


def merge_forwards(forwards: list[Forward]) -> list[Forward]:
    """One forward per pod port, sorted; ValueError when a pod port has two targets."""
    by_port: dict[int, Forward] = {}
    for forward in forwards:
        known = by_port.setdefault(forward.pod_port, forward)
        if known != forward:
            raise ValueError(
                f"--forward: pod port {forward.pod_port} given twice with different targets "
                f"({known.spec()} and {forward.spec()})"
            )
    return [by_port[port] for port in sorted(by_port)]


def forwards_of_cluster(info: dict, api_port: int | None = None) -> list[Forward]:
    """The forwards recorded in localkube.json (older files: `forward_ports` only), plus the
    API port relayed to itself unless a forward names it already."""
    if info.get("forwards") is not None:
        forwards = [Forward.from_json(item) for item in info["forwards"]]
    else:
        forwards = [Forward(int(port)) for port in info.get("forward_ports") or []]
    if api_port and all(f.pod_port != api_port for f in forwards):
        forwards.append(Forward(api_port))
    return merge_forwards(forwards)
