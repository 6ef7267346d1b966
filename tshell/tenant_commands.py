"""`tshell tenants apply` and `tshell tenants list`: the tenants file, made real and shown.

apply makes the cluster and Airflow hold what deploy/tenants.yaml declares
(namespace, ResourceQuota, LimitRange, ServiceAccount, NetworkPolicy, and the
Airflow pool `tfjob-tenant-<name>`), changing only what differs, and prints
one line per object: created, changed (which fields), unchanged or skipped.
list shows every tenant with its quota and, when the cluster answers, what
its namespace uses now.

The cluster is found as for every tshell command, --kubeconfig first
(tshell/config.py, `find_kubeconfig`), else ~/.kube/config; Airflow too.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from tenancy.admission import TenantNotAppliedError, read_tenant_quota
from tenancy.apply import Clients, apply_pools, apply_tenants
from tenancy.pools import PoolApiError, RestPoolClient
from tfjob.quota import format_amount
from tfjob.tenants import TenantsConfig, TenantsFileError, load_tenants
from tshell.airflow_client import AirflowClientError
from tshell.command import open_session, set_command
from tshell.config import load_kubeconfig
from tshell.exitcodes import CommandError, ExitCode
from tshell.runs.commands import format_table

# The prefix of these commands' error messages (tshell/command.py).
ERROR_PREFIX = "tshell tenants: "
HOME_KUBECONFIG = Path("~/.kube/config")

if TYPE_CHECKING:  # argparse names the type of add_subparsers' result privately
    from tshell.command import Subparsers


def find_cluster_kubeconfig(given: str | None) -> Path:
    """The cluster to administer: tshell's one lookup, else kubernetes' own ~/.kube/config."""
    return Path(load_kubeconfig(given) or HOME_KUBECONFIG).expanduser()


def make_clients(kubeconfig: Path) -> Clients:
    import kubernetes

    if not kubeconfig.exists():
        raise FileNotFoundError(
            f"kubeconfig {kubeconfig} does not exist: start localkube "
            "(`make up`) or pass --kubeconfig / set KUBECONFIG"
        )
    api_client = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))
    return Clients.from_api_client(api_client)


def fail(message: str) -> CommandError:
    return CommandError(message, ExitCode.FAILED)


def cmd_apply(args: argparse.Namespace, out: TextIO) -> ExitCode:
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    try:
        config = load_tenants(args.file)
    except TenantsFileError as exc:
        raise fail(str(exc)) from None
    unknown = sorted(set(args.only or ()) - set(config.names()))
    if unknown:
        raise fail(
            f"--only {', '.join(unknown)}: not in {config.source}; tenants there: "
            f"{', '.join(config.names())}"
        )
    kubeconfig = find_cluster_kubeconfig(args.kubeconfig)
    try:
        results = apply_tenants(make_clients(kubeconfig), config, only=args.only)
    except FileNotFoundError as exc:
        raise fail(str(exc)) from None
    except ApiException as exc:
        raise fail(
            f"the cluster ({kubeconfig}) refused: HTTP {exc.status} {exc.reason}: "
            f"{(exc.body or '')[:300]}"
        ) from None
    except HTTPError as exc:
        raise fail(
            f"the cluster of {kubeconfig} is not reachable ({exc.__class__.__name__});"
            " is localkube running (`make up`)?"
        ) from None
    for result in results:
        print(result.describe(), file=out)
    if args.no_pools:
        return ExitCode.OK
    try:
        pools = RestPoolClient(*_airflow_login())
        wanted = set(args.only) if args.only else None
        pool_results = [
            r
            for r in apply_pools(pools, config)
            if wanted is None or r.name.removeprefix("tfjob-tenant-") in wanted
        ]
    except (PoolApiError, RuntimeError, ValueError) as exc:
        raise fail(
            f"Kubernetes objects applied; Airflow pools not: {exc} (rerun when "
            "Airflow is up, or --no-pools)"
        ) from None
    for result in pool_results:
        print(result.describe(), file=out)
    return ExitCode.OK


def _airflow_login() -> tuple[str, Callable[[], str]]:
    # An unusable configuration (ConfigError, a ValueError) is the pools' failure, not apply's.
    session = open_session().airflow

    def token() -> str:
        try:
            return session.token()
        except AirflowClientError as exc:
            raise RuntimeError(str(exc)) from None

    return session.url, token


def cmd_list(args: argparse.Namespace, out: TextIO) -> ExitCode:
    try:
        config = load_tenants(args.file)
    except TenantsFileError as exc:
        raise fail(str(exc)) from None
    usage, note = _read_usage(config, args.kubeconfig)
    rows = []
    for tenant in config.tenants:
        used = usage.get(tenant.name)
        row = {
            "tenant": tenant.name,
            "namespace": tenant.namespace,
            "pool": tenant.pool,
            "max_jobs": tenant.max_concurrent_jobs,
            "quota": dict(tenant.quota),
            "used": {k: format_amount(k, v) for k, v in used.items()}
            if isinstance(used, dict)
            else used,
        }
        rows.append(row)
    if args.json:
        print(json.dumps(rows, indent=2), file=out)
        return ExitCode.OK

    def cell(row: dict, key: str) -> str:
        used = row["used"]
        shown = used.get(key, "?") if isinstance(used, dict) else "?"
        return f"{shown}/{row['quota'][key]}"

    print(
        format_table(
            ["tenant", "namespace", "pool", "max jobs", "cpu", "memory", "gpu", "pods"],
            [
                [
                    r["tenant"],
                    r["namespace"],
                    r["pool"],
                    r["max_jobs"],
                    cell(r, "cpu"),
                    cell(r, "memory"),
                    cell(r, "nvidia.com/gpu"),
                    cell(r, "pods"),
                ]
                for r in rows
            ],
        ),
        file=out,
    )
    print(f"(used/quota; tenants from {config.source}{'; ' + note if note else ''})", file=out)
    return ExitCode.OK


def _read_usage(
    config: TenantsConfig, kubeconfig_arg: str | None
) -> tuple[dict[str, dict[str, Decimal] | str], str]:
    """Each tenant's used amounts, or a word saying why not ('not applied', unreachable)."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    kubeconfig = find_cluster_kubeconfig(kubeconfig_arg)
    try:
        clients = make_clients(kubeconfig)
    except FileNotFoundError:
        return {}, f"no cluster ({kubeconfig} missing): usage unknown"
    usage: dict[str, dict[str, Decimal] | str] = {}
    for tenant in config.tenants:
        try:
            usage[tenant.name] = read_tenant_quota(clients.core, tenant)[1]
        except TenantNotAppliedError:
            usage[tenant.name] = "not applied"
        except (ApiException, HTTPError) as exc:
            return {}, f"cluster not reachable ({exc.__class__.__name__}): usage unknown"
    missing = [name for name, used in usage.items() if used == "not applied"]
    note = f"not applied yet: {', '.join(missing)}" if missing else ""
    return usage, note


def register(subparsers: Subparsers) -> None:
    """Add `tenants apply` and `tenants list` to tshell's subcommands."""
    tenants = subparsers.add_parser("tenants", help="apply and list tenants (deploy/tenants.yaml)")
    actions = tenants.add_subparsers(dest="tenants_command", metavar="ACTION")
    apply = actions.add_parser(
        "apply",
        help="create or update every tenant's namespace, "
        "quota, defaults, network policy, account and "
        "Airflow pool; only what changed",
    )
    listing = actions.add_parser("list", help="tenants with their quota and current usage")
    for parser in (apply, listing):
        parser.add_argument(
            "--file", help="tenants file (default $TFJOB_TENANTS_FILE, else deploy/tenants.yaml)"
        )
        parser.add_argument(
            "--kubeconfig",
            help="cluster to use (default: TSHELL_KUBECONFIG, the config file's, KUBECONFIG, "
            "the embedded localkube's, else ~/.kube/config)",
        )
    apply.add_argument("--only", nargs="+", metavar="TENANT", help="apply only these tenants")
    apply.add_argument("--no-pools", action="store_true", help="leave Airflow's pools alone")
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    set_command(apply, cmd_apply, ERROR_PREFIX)
    set_command(listing, cmd_list, ERROR_PREFIX)

    def show_help(_args: argparse.Namespace, _out: TextIO) -> ExitCode:
        tenants.print_help(sys.stderr)
        return ExitCode.INVALID_REQUEST

    set_command(tenants, show_help, ERROR_PREFIX)
