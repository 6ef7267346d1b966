"""The base of every error the pod side raises (the tree is drawn in runtime/__init__.py).

Shipped to pods with the other runtime files, imported as `runtime.errors`
there and on the host. Standard library only, and no imports at all.
"""


class PodError(Exception):
    """A pod-side step refused its input or could not finish; the message never holds a
    credential. The entry scripts turn each into an exit code (protocol.py)."""
