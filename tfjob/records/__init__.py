"""The values that cross a package as JSON: XCom values and the trigger's event.

Airflow stores what one task hands the next (XCom), and what the triggerer hands a
deferred task back (a trigger event), as JSON. Each such value has one frozen record
here, with `to_payload()` (the JSON stored) and `from_payload()` (its reader), so the
pipeline that writes them (operators/) and the readers (operators/, runview/, tshell/)
share one shape instead of string keys:

- `outcomes.py`: fetch_bundle's bundle identity, launch's warm start and failure,
  run.json's `launch` outcome, archive's and publish's return values;
- `replicas.py`: a replica's status, the trigger's `TrainingEvent`, train's `replicas`;
- `run.py`: the run's description (validate's), the gang's endpoints (launch's), the
  grants plan (launch's, kept by the trigger).

A payload is a contract with the runs already recorded: `to_payload` writes exactly
what earlier versions wrote (same keys, same order), a field is added with a default
and never renamed, and `from_payload` reads what earlier writers stored. The modules
are imported by name (`tfjob.records.replicas`): this file imports none of them, so
tfjob's own modules (the restart verdict) can use the replica records.
"""
