"""Tenancy administration: applying tenants to the cluster and to Airflow (objects, pools,
roles) and admitting a request against its tenant's quota.

Why this is its own package: the pipeline's `validate` step, `tshell tenants` and the
embedded services all apply and read tenants with the same code, so it sits below both
operators and tshell. It imports tfjob and the Kubernetes client, never Airflow at module
level. One error base (`errors.py`):

    TenancyError
    ├── PoolApiError (RuntimeError)          Airflow's pools API refused or failed
    │   ├── PoolUnavailableError             the API cannot be reached
    │   └── PoolConflictError                another writer changed the pool
    ├── TenantNotAppliedError (RuntimeError) the tenant's namespace or quota is missing
    └── TenancyRefusal (ValueError)          the gang does not fit the tenant's quota
"""
