"""The base of every error the web UI's API raises (the tree is in runview/__init__.py)."""


class RunViewError(Exception):
    """A request to the TFJob tab or the tenants page cannot be answered; the message says
    why and the route turns it into an HTTP status."""
