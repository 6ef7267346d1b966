"""Airflow roles and users of the tenants (FAB auth manager): who may act for a tenant.

Why this exists: a run's tenant comes from its DAG (`tfjob_submit__<tenant>`
or the tenant of a request file), and Airflow's own authorization decides who
may trigger, see, clear and cancel a DAG's runs. Each tenant DAG names its
tenant's roles in `access_control` (operators/dag_factory.py); this module
makes those roles exist with the rights every Airflow user needs besides the
DAGs themselves: the UI, their own profile, and task instances, logs and
XComs, which the FAB auth manager checks *per DAG* on top. A tenant role has
no right on DAGs as a whole (every right on a DAG's runs, task instances, logs
and XComs also needs a right on that DAG: the auth manager asks both), and
none to create asset events (an asset event would start another team's
downstream DAGs).

The DAG processor refuses a DAG whose `access_control` names a role that does
not exist, so the roles are made before Airflow's components start:
`scripts/airflow_server.py` runs this module (`python -m tenancy.roles`)
after `airflow db migrate`. It also creates the embedded default's users: the
admin and one user per tenant role, `<role>-user`, with generated passwords
kept in a 0600 JSON file (username → password) that tshell and the tests read.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from tfjob.tenants import TenantsConfig, load_tenants, tenant_user_name

if TYPE_CHECKING:
    from airflow.providers.fab.auth_manager.security_manager.override import (
        FabAirflowSecurityManagerOverride,
    )

ADMIN_USER = "admin"
ADMIN_ROLE = "Admin"
PASSWORD_BYTES = 12
USERS_FILE_MODE = 0o600


def list_tenant_role_permissions() -> list[tuple[str, str]]:
    """(action, resource) pairs of a tenant role: FAB's Viewer and User, less the global ones.

    Dropped: every right on the resource "DAGs" (it comes per DAG from
    access_control) and creating asset events. Added: reading the plugin list,
    without which the UI shows no plugin tab (the run's TFJob tab) and answers
    its URL with a 404 page; and reading "DAG Dependencies", which Airflow 3.3's
    graph of a DAG needs (`/ui/structure/structure_data` asks for it besides the
    DAG's own read right) and which FAB has only as a global resource. It
    exposes no other tenant's DAG: the structure route also needs the DAG's own
    read right, and the dependency graph (`/ui/dependencies`) and a graph's
    external dependencies are filtered to the DAGs the caller may read.
    """
    from airflow.providers.fab.auth_manager.security_manager.override import (
        FabAirflowSecurityManagerOverride as Override,
    )
    from airflow.providers.fab.www.security import permissions

    global_only = {permissions.RESOURCE_DAG}
    kept = []
    for action, resource in [*Override.VIEWER_PERMISSIONS, *Override.USER_PERMISSIONS]:
        if action == permissions.ACTION_CAN_ACCESS_MENU:
            kept.append((action, resource))
        elif resource in global_only or (action, resource) == (
            permissions.ACTION_CAN_CREATE,
            "Assets",
        ):
            continue
        else:
            kept.append((action, resource))
    kept.append((permissions.ACTION_CAN_READ, permissions.RESOURCE_PLUGIN))
    kept.append((permissions.ACTION_CAN_READ, permissions.RESOURCE_DAG_DEPENDENCIES))
    return sorted(set(kept))


def list_tenant_roles(config: TenantsConfig) -> list[str]:
    """Every role any tenant names, once, in file order."""
    seen: dict[str, None] = {}
    for tenant in config.tenants:
        for role in tenant.roles:
            seen.setdefault(role, None)
    return list(seen)


def sync_tenant_role(
    security_manager: FabAirflowSecurityManagerOverride,
    name: str,
    wanted: Iterable[tuple[str, str]],
) -> None:
    """Create role `name` if absent; give it exactly `wanted` besides its per-DAG rights."""
    from airflow.providers.fab.www.security import permissions

    role = security_manager.add_role(name)
    wanted = set(wanted)
    for permission in list(role.permissions):
        pair = (permission.action.name, permission.resource.name)
        per_dag = permission.resource.name.startswith(tuple(permissions.PREFIX_LIST))
        if pair not in wanted and not per_dag:
            security_manager.remove_permission_from_role(role, permission)
    for action, resource in sorted(wanted):
        permission = security_manager.create_permission(action, resource)
        security_manager.add_permission_to_role(role, permission)


def ensure_user(
    security_manager: FabAirflowSecurityManagerOverride,
    username: str,
    role_name: str,
    password: str,
) -> None:
    """User `username` with exactly role `role_name` and this password."""
    from werkzeug.security import generate_password_hash

    # FAB hashes through Flask's app config, which a process without the web app lacks.
    hashed = generate_password_hash(password)
    role = security_manager.find_role(role_name)
    if role is None:
        raise RuntimeError(f"role {role_name!r} does not exist; sync the tenant roles first")
    user = security_manager.find_user(username=username)
    if user is None:
        created = security_manager.add_user(
            username, username, "user", f"{username}@tfjob.invalid", role, hashed_password=hashed
        )
        if not created:
            raise RuntimeError(f"Airflow could not create user {username!r}")
        return
    user.roles = [role]
    user.password = hashed
    security_manager.update_user(user)


def read_users_file(path: Path) -> dict[str, str]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def write_users_file(path: Path, users: dict[str, str]) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, USERS_FILE_MODE)
    with os.fdopen(descriptor, "w") as handle:
        json.dump(users, handle, indent=1, sort_keys=True)
    os.chmod(path, USERS_FILE_MODE)


def plan_users(config: TenantsConfig, known: dict[str, str]) -> dict[str, tuple[str, str]]:
    """username → (role, password): the admin and `<role>-user` per tenant role.

    A password already in `known` is kept, so a restart does not change logins.
    """
    users = {ADMIN_USER: ADMIN_ROLE}
    for role in list_tenant_roles(config):
        users[tenant_user_name(role)] = role
    return {
        name: (role, known.get(name) or secrets.token_urlsafe(PASSWORD_BYTES))
        for name, role in users.items()
    }


def sync_access(config: TenantsConfig, users_file: Path | None) -> dict[str, str]:
    """Roles of every tenant; with `users_file`, also the admin and one user per role."""
    from airflow.providers.fab.www.security_appless import ApplessAirflowSecurityManager
    from airflow.utils.session import create_session

    wanted = list_tenant_role_permissions()
    users = plan_users(config, read_users_file(users_file)) if users_file else {}
    with create_session() as session:
        security_manager = ApplessAirflowSecurityManager(session=session)
        security_manager.sync_roles()
        for role in list_tenant_roles(config):
            sync_tenant_role(security_manager, role, wanted)
        for username, (role, password) in users.items():
            ensure_user(security_manager, username, role, password)
    passwords = {name: password for name, (_role, password) in users.items()}
    if users_file:
        write_users_file(users_file, passwords)
    return passwords


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Create the tenants' Airflow roles (and users).")
    parser.add_argument(
        "--tenants-file", help="default: $TFJOB_TENANTS_FILE, else deploy/tenants.yaml"
    )
    parser.add_argument(
        "--users-file",
        type=Path,
        help="also create the admin and <role>-user per tenant role; "
        "passwords kept in this 0600 JSON file",
    )
    args = parser.parse_args(argv)
    config = load_tenants(args.tenants_file)
    users = sync_access(config, args.users_file)
    roles = list_tenant_roles(config)
    print(f"tenant roles: {', '.join(roles)}; users: {', '.join(sorted(users)) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
