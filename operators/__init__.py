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
    ├── WarmStartError (ValueError)             the warm start cannot be had; nothing starts
    │                                            (restore.py)
    ├── TenancyRefusal (ValueError)             the request may not run now: unknown tenant,
    │                                            tenant not applied, no room in quota
    │                                            (tenant_admission.py)
    ├── TenantNotAppliedError (RuntimeError)    the tenant's namespace is missing; run
    │                                            `tshell tenants apply`
    │                                            (tenant_admission.py)
    ├── PoolApiError (RuntimeError)             Airflow refused or failed a pool call
    │   ├── PoolUnavailableError                 ... Airflow cannot answer now; try again
    │   └── PoolConflictError                    ... Airflow already has the pool (409)
    │                                            (pool_clients.py)
    ├── LogRequestError (ValueError)            the TFJob tab's log query breaks a rule:
    │                                            answered 400 (run_view_logs.py)
    └── RunFilesError                           a run's files cannot be served; `status` is
        ├── RunFilePathError                     the HTTP answer (run_files.py): 400 a bad path,
        ├── RunFileNotFoundError                 404 no such file,
        ├── RunNotArchivableError                404 a run with nothing archived,
        └── RunStorageError                      502 S3 failed
"""
