"""Development tooling beside the worker library: what ``kb up`` runs around the stack for a
developer (no Airflow task imports anything here)."""
