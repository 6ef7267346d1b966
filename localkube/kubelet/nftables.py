"""A pod's NetworkPolicy rules as an nftables table inside the pod's own network namespace.

Why the pod's namespace: every packet a pod sends or receives crosses it, the
pod's processes hold no CAP_NET_ADMIN there (they cannot list or change the
table), and the table dies with the namespace, so nothing is left to clean up
and an IP handed to a later pod starts with no rules. One table `inet
localkube` with two chains:

- `input` (ingress): replies of allowed connections (conntrack
  established/related) and loopback pass; when the pod is isolated for ingress,
  what an allowance names passes (pod peers by source IP *and* MAC, blocks by
  source address, with their ports) and the rest is refused (TCP reset, else
  ICMP administratively prohibited);
- `output` (egress): replies pass; each forwarded port on 127.0.0.1 is
  accepted or refused as its target is allowed (policymodel.judge_forward);
  other loopback traffic passes; when the pod is isolated for egress, only what
  an allowance names passes (pods by destination IP).

The whole table is replaced in one `nft -f` transaction (add, delete, add), run
in the pod's namespace with `nsenter --net`, so no packet ever meets half a
ruleset. A pod selected by no policy gets no table at all.
"""

from __future__ import annotations

import ipaddress
import subprocess

from localkube.kubelet import network
from localkube.kubelet.policymodel import (
    Allowance,
    Direction,
    DirectionRules,
    PodRules,
    PortRange,
)

TABLE = "localkube"
NFT_TIMEOUT_S = 30
REFUSE = ("meta l4proto tcp reject with tcp reset", "reject with icmpx admin-prohibited")
# Removing the table is itself one transaction that works whether or not it exists.
OPEN_SCRIPT = f"table inet {TABLE}\ndelete table inet {TABLE}\n"


def merge_ranges(ranges: tuple[PortRange, ...]) -> list[PortRange]:
    """Overlapping or adjacent ranges of a protocol merged (nft refuses overlapping elements)."""
    merged: list[PortRange] = []
    for r in sorted(ranges):
        last = merged[-1] if merged else None
        if last and last.protocol is r.protocol and r.first <= last.last + 1:
            merged[-1] = PortRange(r.protocol, last.first, max(last.last, r.last))
        else:
            merged.append(r)
    return merged


def render_ports(ports: tuple[PortRange, ...] | None) -> str:
    if ports is None:
        return ""
    elements = []
    for r in merge_ranges(ports):
        span = str(r.first) if r.first == r.last else f"{r.first}-{r.last}"
        elements.append(f"{r.protocol.value.lower()} . {span}")
    return f" meta l4proto . th dport {{ {', '.join(elements)} }}"


def render_allowance(allowance: Allowance, direction: Direction) -> list[str]:
    side = "saddr" if direction is Direction.INGRESS else "daddr"
    ports = render_ports(allowance.ports)
    lines = []
    if allowance.any_peer:
        lines.append(f"{ports.strip()} accept".strip())
    if allowance.pods:
        if direction is Direction.INGRESS:
            pairs = ", ".join(f"{p.ip} . {p.mac}" for p in allowance.pods)
            lines.append(f"ip saddr . ether saddr {{ {pairs} }}{ports} accept")
        else:
            ips = ", ".join(sorted({p.ip for p in allowance.pods}))
            lines.append(f"ip daddr {{ {ips} }}{ports} accept")
    for block in allowance.blocks:
        net = ipaddress.ip_network(block.cidr)
        family = "ip" if net.version == 4 else "ip6"
        line = f"{family} {side} {net}"
        excepts = [ipaddress.ip_network(e) for e in block.excepts]
        excepts = list(ipaddress.collapse_addresses(e for e in excepts if e.version == net.version))
        if excepts:
            line += f" {family} {side} != {{ {', '.join(map(str, excepts))} }}"
        lines.append(f"{line}{ports} accept")
    return lines


def render_direction(rules: DirectionRules, direction: Direction) -> list[str]:
    if not rules.isolated:
        return []
    lines = [line for a in rules.allowances for line in render_allowance(a, direction)]
    return lines + list(REFUSE)


def render_pod_table(rules: PodRules) -> str:
    """The nft script that makes the pod's table say `rules` (OPEN_SCRIPT when unrestricted)."""
    if not rules.restricted and all(v.allowed for v in rules.forwards):
        return OPEN_SCRIPT
    ingress = [
        "type filter hook input priority 0; policy accept;",
        "ct state established,related accept",
        'iifname "lo" accept',
        *render_direction(rules.ingress, Direction.INGRESS),
    ]
    egress = [
        "type filter hook output priority 0; policy accept;",
        "ct state established,related accept",
        *(
            f'oifname "lo" ip daddr 127.0.0.1 tcp dport {v.pod_port} '
            + ("accept" if v.allowed else "reject with tcp reset")
            for v in rules.forwards
        ),
        'oifname "lo" accept',
        *render_direction(rules.egress, Direction.EGRESS),
    ]

    def chain(name: str, lines: list[str]) -> str:
        return f"  chain {name} {{\n" + "".join(f"    {line}\n" for line in lines) + "  }\n"

    return (
        OPEN_SCRIPT
        + f"table inet {TABLE} {{\n"
        + chain("input", ingress)
        + chain("output", egress)
        + "}\n"
    )


def apply_pod_table(netns: str, script: str) -> None:
    """Run `script` with `nft -f -` inside the pod's network namespace; NetworkError if refused."""
    path = f"{network.NETNS_DIR}/{netns}"
    cmd = ["nsenter", f"--net={path}", "nft", "-f", "-"]
    try:
        proc = subprocess.run(
            cmd, input=script, capture_output=True, text=True, timeout=NFT_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise network.NetworkError(
            f"nft in {netns} could not run ({exc}); NetworkPolicies need nftables "
            "(apt-get install nftables)"
        ) from exc
    if proc.returncode != 0:
        raise network.NetworkError(
            f"nft -f in {netns} failed (rc {proc.returncode}): {proc.stderr.strip()[:2000]}"
        )
