"""The local stack without Docker, one module per part on a common floor.

- ``process``: supervision (start a part in its own process group, wait until it is
  ready, stop exactly what was started); ``secrets``: the stack's generated secrets.
- the parts: ``s3`` (weed), ``ocr`` and ``search`` (the project's HTTP services),
  ``airflow_local`` (standalone), ``postgres``, ``redis_server`` and ``airflow_celery`` (the
  distributed topology's Airflow), ``observe`` (exporter, StatsD bridge, mail sink,
  Prometheus, Alertmanager).
- ``topology``: ``up``, ``down`` and ``status`` of the whole, and the one rule that tells a
  local stack from a distributed one.
"""
