"""What the project calls its Airflow objects, named once: the DAGs use these names, and so
do ``kb up`` (which creates the pool), ``kb pools sync`` and the REST client's callers.

Compose's ``airflow-init`` creates the same pool by name (``docker-compose.yaml``): a test
holds it to ``OCR_POOL``.
"""

INGEST_DAG_ID = "kb_ingest"
REVIEW_DAG_ID = "kb_review"
REVIEW_DECIDE_TASK = "decide"  # kb_review's human-in-the-loop task
REVIEW_ACT_TASK = "act"  # kb_review's task that applies the decision to the ledger
# The extract task's pool (its slots: the OCR replicas' published capacity) and queue (the
# GPU workers').
OCR_POOL = "gpu_ocr"
OCR_QUEUE = "gpu"
# The module every task process starts with already imported (preload.py): the local stack's
# executor forkserver and each Celery worker (celery_config.py) import it by this name.
TASK_PRELOAD_MODULE = "kb_airflow.preload"
