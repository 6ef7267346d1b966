"""Airflow glue on the cncf.kubernetes provider: the training pipeline's operators and tasks."""
