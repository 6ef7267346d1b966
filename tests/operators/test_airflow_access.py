"""What a tenant's Airflow role may do besides its DAGs' own rights (tenancy/roles.py)."""

from __future__ import annotations

from tenancy.roles import list_tenant_role_permissions


def test_a_tenant_role_has_no_right_on_dags_as_a_whole_nor_to_create_asset_events():
    granted = set(list_tenant_role_permissions())
    assert not [pair for pair in granted if pair[1] == "DAGs" and pair[0] != "menu_access"]
    assert ("can_create", "Assets") not in granted


def test_a_tenant_role_may_read_what_airflows_pages_of_its_own_dags_ask_for():
    granted = set(list_tenant_role_permissions())
    # The graph (/ui/structure/structure_data) asks for DAG Dependencies besides the DAG's
    # own read right (issue 27 item 6); the grid, a task's log and XComs for these.
    for resource in (
        "DAG Dependencies",
        "DAG Runs",
        "Task Instances",
        "Task Logs",
        "XComs",
        "DAG Versions",
        "Plugins",
    ):
        assert ("can_read", resource) in granted, resource
