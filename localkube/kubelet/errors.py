"""The base of the kubelet's errors (the tree is drawn in localkube/errors.py).

Imports nothing but that base: enter.py, a helper process that must start fast,
imports the kubelet's errors through exec.py.
"""

from localkube.errors import LocalkubeError


class KubeletError(LocalkubeError):
    """Raised by the kubelet; the message names the pod, container or command concerned."""
