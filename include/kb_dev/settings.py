"""The local stack's settings (``kb up``): ports, the state folder, bounded waits."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from kb.settings import default_state_dir


class StackSettings(BaseSettings):
    """The local stack started by ``kb up``: ports, state folder, bounded waits."""

    model_config = SettingsConfigDict(env_prefix="KB_", extra="ignore")

    state_dir: Path = Field(default_factory=default_state_dir)
    host: str = "127.0.0.1"

    s3_port: int = 8333
    # weed runs a master, a volume server and a filer beside the S3 gateway; each also
    # listens on its port + 10000 for gRPC.
    weed_master_port: int = 9333
    weed_volume_port: int = 9340
    weed_filer_port: int = 8888

    ocr_port: int = 8090
    ocr_start_timeout_s: float = 120.0
    search_port: int = 8070

    airflow_port: int = 8080
    airflow_worker_log_port: int = 8793
    airflow_trigger_log_port: int = 8794
    # who `kb` commands log in to Airflow's API as: the stack's own user, whose password is in
    # the secrets file, unless the environment names another (a reviewer, KB_AIRFLOW_PASSWORD)
    airflow_user: str = "kb"
    # one call to Airflow's REST API; a repeatable call that times out is retried until the
    # command's own deadline (kb_dev.airflow_api)
    airflow_api_timeout_s: float = Field(30.0, gt=0)
    gpu_ocr_pool_slots: int = 2
    airflow_parallelism: int = 4

    # `kb up --distributed` only: Postgres and Redis (Debian's packages), Celery workers,
    # OCR replicas (the first on ocr_port, the others on ocr_replica_ports). The gpu_ocr
    # pool gets replicas x ocr_replica_concurrency slots.
    postgres_port: int = 15432
    redis_port: int = 16379
    ocr_replicas: int = Field(2, ge=1)
    ocr_replica_ports: list[int] = Field(default_factory=lambda: [8091])
    ocr_replica_concurrency: int = Field(1, ge=1)
    celery_worker_concurrency: int = Field(2, ge=1)
    airflow_extra_worker_log_ports: list[int] = Field(default_factory=lambda: [8795])

    # Local observability (``kb up``, unless ``--no-observe``): the pipeline exporter, a
    # StatsD bridge for Airflow's metrics, Debian's Prometheus and Alertmanager when
    # installed, and a mail sink that receives the stack's alerts (``kb alerts``).
    observe: bool = True
    exporter_port: int = 8096
    statsd_port: int = 9125  # UDP
    statsd_http_port: int = 8097
    prometheus_port: int = 9090
    alertmanager_port: int = 9093
    mail_port: int = 8025
    # Prometheus scrapes and evaluates rules this often locally (15 s in compose): a
    # newcomer's first run shows on a dashboard within seconds.
    scrape_interval_s: int = Field(5, ge=1)

    start_timeout_s: float = 180.0
    stop_timeout_s: float = 20.0

    @classmethod
    def from_env(cls, env: dict[str, str]) -> "StackSettings":
        """The settings another process would read from ``env`` (a stack started elsewhere)."""
        import os
        from unittest import mock

        with mock.patch.dict(os.environ, {k: v for k, v in env.items() if k.startswith("KB_")}, clear=True):
            return cls()
