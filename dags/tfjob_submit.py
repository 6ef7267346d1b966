"""`tfjob_submit`: train from a request given as trigger conf (UI form, REST API, tshell submit).

Every request field is an Airflow Param built from the request's JSON Schema,
so the trigger form shows them all and Airflow refuses conf that does not fit
the schema before a run starts; the request model checks the rest in
`validate`.
"""

from operators.dag_factory import build_submit_dag

dag = build_submit_dag()
