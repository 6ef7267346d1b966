"""Airflow glue on the cncf.kubernetes provider: the training pipeline's operators and tasks.

Errors: one base (`errors.py`). Each error also keeps the base that gives it
its meaning to Airflow or to its callers: an `AirflowException` lets Airflow
retry the task, an `AirflowFailException` fails it for good, the Python bases
are what existing `except` clauses catch.

    PipelineError
    ├── GangStartError (AirflowException)       the gang did not start; the task may be
    │                                            retried (gang.py)
    ├── GangStopError (AirflowException)        a gang's pods did not go away (gang.py)
    ├── TrainingFailed (AirflowFailException)   training failed or ran out of time; no
    │                                            retry (train.py)
    ├── DeliveryError (RuntimeError)            cluster.json did not reach a pod (delivery.py)
    │   └── _Undelivered                         one try of it failed; never leaves delivery.py
    ├── RecoveryError (RuntimeError)            the model could not be copied out of the
    │                                            keeper (modelrecovery.py)
    ├── S3Unavailable (RuntimeError)            S3 failed past the retry budget (s3retry.py)
    ├── ClearFailed (RuntimeError)              an earlier try's outputs could not be
    │                                            deleted (runoutputs.py)
    ├── LatestRaceLost (RuntimeError)           other publishes kept writing `latest` (latest.py)
    ├── ForeignObjectError (RuntimeError)       objects carrying this run's key belong to
    │                                            another run: left alone (kubeobjects.py)
    ├── BundleMissing (FileNotFoundError)       no bundle at the request's URL (bundlecheck.py)
    ├── RequestNameError (ValueError)           a request file's request is not named after
    │                                            the file (request_files.py)
    ├── PresignConnectionMissing                the tenant's pods-only presigning connection
    │   (AirflowFailException)                   is not defined; no retry (grants.py)
    └── WarmStartError (ValueError)             the warm start cannot be had; nothing starts
                                                 (restore.py)

Tenancy's errors (admission, pools) are tenancy/'s own; the web UI's are runview/'s.
"""
