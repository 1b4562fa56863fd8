"""Airflow's Celery configuration for this project (``[celery] celery_config_options``):
Airflow's default, and the tasks' libraries imported by each Celery worker before it forks
its pool.

A Celery worker's pool processes are forks of the worker, and each Airflow task process is a
fork of a pool process, so what the worker imported at start every task process has without
importing it (kb_airflow/preload.py says what and why). Celery imports ``imports`` as the
worker starts and fails the start if one cannot be imported.
"""

from airflow.providers.celery.executors.default_celery import DEFAULT_CELERY_CONFIG

from kb_airflow.names import TASK_PRELOAD_MODULE

CELERY_CONFIG = {**DEFAULT_CELERY_CONFIG, "imports": (TASK_PRELOAD_MODULE,)}
