"""The base of every error localkube raises on purpose, and the whole tree of them.

Catch LocalkubeError to catch any of them. Each line says where the error is
raised and what its caller does about it; errors of the standard library
(OSError, ValueError, TimeoutError) and of aiohttp pass through as they are.
This module imports nothing: the kubelet's fast-starting helper processes
(enter.py) import the kubelet's errors too.

    LocalkubeError
    ├── UpError                cluster.py, nodepower.py: up, down, blink or a node's power could
    │                          not do what was asked; the message says why and where the logs
    │                          are: fix that and run the command again
    ├── TokenError             credentials.py: DIR/token is missing, unreadable or empty: the
    │                          message says which `up` to run
    ├── CertificateError       certificates.py: DIR/pki is missing, incomplete or expired: the
    │                          message says which `up` to run
    ├── ApiError               apiserver/errors.py: the API server refuses a request; the
    │                          client gets it as a v1 Status (code, reason, message)
    ├── PodFsError             hollow/podfs.py (also an OSError): a simulated pod's path
    │                          cannot be used: the simulated exec prints it as a shell would
    ├── RuleError              hollow/rules.py (also a ValueError): a simulate-* annotation's
    │                          value is not allowed: the hollow pod fails, naming it
    ├── ShellSyntaxError       hollow/shell.py (also a ValueError): a simulated exec's script
    │                          uses what the small shell does not understand: exit code 2
    └── KubeletError           kubelet/errors.py: the base of the kubelet's own
        ├── ApiRequestError    kubelet/apiclient.py: the API server refused or failed one of
        │                      the kubelet's requests (`.status`): log it, try again later
        ├── RelistRequired     kubelet/apiclient.py: the watch's resourceVersion is too old
        │                      (410 Gone): list the pods again, then watch from there
        ├── NetworkError       kubelet/network.py: an `ip` command failed, or no pod IP is
        │                      left: the pod cannot start
        ├── VolumeError        kubelet/volumes.py, environment.py: a volume or an env source
        │                      cannot be set up yet (a missing ConfigMap, Secret or key): the
        │                      container waits and the kubelet tries again
        ├── ContainerConfigError  kubelet/securitycontext.py: the container cannot run as
        │                      specified (CreateContainerConfigError): it waits, tried again
        ├── NoCommandError     kubelet/environment.py: neither the container nor its image
        │                      names a command (CreateContainerError): final, exit 128
        └── ContainerNotRunning  kubelet/exec.py: no live process to exec into: the exec or
                               exec hook fails with this message
"""


class LocalkubeError(Exception):
    """Anything localkube raises on purpose; the message is written for the person running it."""
