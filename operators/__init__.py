"""Airflow glue on top of the cncf.kubernetes provider: the training pipeline's operators, trigger and tasks."""
