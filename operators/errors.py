"""The base of every error the pipeline's operators raise (the tree is in operators/__init__.py).

Each error also keeps the base Airflow or Python gives it meaning by
(`AirflowException`: Airflow may retry the task; `AirflowFailException`: it
fails for good; `RuntimeError`, `ValueError`, `FileNotFoundError` for the
callers that catch those), so re-basing them on `PipelineError` changes no
behaviour; `except PipelineError` catches every failure of ours.
"""


class PipelineError(Exception):
    """A step of a training run's pipeline could not do its part; the message says why."""
