"""The base of every error tenancy raises (the tree is in tenancy/__init__.py)."""


class TenancyError(Exception):
    """Applying or reading a tenant could not be done; the message says why."""
