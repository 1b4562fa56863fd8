"""The workbench beside the worker library: the local stack (``kb_dev.stack``), the ``kb``
command (``kb_dev.cli``), benchmarks (``kb_dev.bench``), the documents this project writes
(``kb_dev.samples``) and the real corpus (``kb_dev.corpus``).

No Airflow task imports anything here, and nothing in ``kb`` does (a test walks the imports).
"""

from pathlib import Path

# The checkout (kb up runs the DAGs, plugins and configuration from it).
REPO_ROOT = Path(__file__).resolve().parents[2]
