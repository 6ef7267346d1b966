"""Exit codes of the pod runtime's entry scripts: the one home of this part of the pod protocol.

Standard library only (shipped flat to pods with the other runtime files);
the bootstrap returns them, and Airflow's verdicts read them
(`operators/replicas.py`).
"""

EXIT_USAGE = 2  # no command, no code/, a bad setting
EXIT_NO_CLUSTERSPEC = 64  # no cluster.json within TFJOB_CLUSTERSPEC_TIMEOUT
EXIT_BAD_CLUSTERSPEC = 65  # cluster.json unreadable or malformed
# The program exited 0 but its model could not be uploaded: the model owner's
# keeper container still holds it, and `archive` copies it out of the pod.
EXIT_UPLOAD_FAILED = 74
