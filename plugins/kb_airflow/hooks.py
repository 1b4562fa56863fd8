"""Hooks: each owns one external client, built from an Airflow connection.

The S3 credentials live in the connection (``kb_s3`` by default: host, port, login =
access key, password = secret key, extra ``{"secure": false}``), never in code.
"""

from __future__ import annotations

from functools import cached_property

from airflow.sdk import BaseHook

from kb.objectstore import ObjectStore
from kb.settings import OcrMode


class ObjectStoreHook(BaseHook):
    """MinIO / any S3 server, through ``kb.objectstore.ObjectStore``."""

    conn_name_attr = "s3_conn_id"
    default_conn_name = "kb_s3"
    conn_type = "generic"
    hook_name = "KB object store (S3)"

    def __init__(self, s3_conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.s3_conn_id = s3_conn_id

    def get_conn(self) -> ObjectStore:
        return self.store

    @cached_property
    def store(self) -> ObjectStore:
        conn = self.get_connection(self.s3_conn_id)
        return _store_for(conn, conn.extra_dejson or {})

    async def astore(self) -> ObjectStore:
        """``store`` for code on an event loop (a trigger): the connection is looked up with
        the SDK's async calls, which do not block the loop. The client itself is synchronous."""
        conn = await self.aget_connection(self.s3_conn_id)
        return _store_for(conn, await conn.aextra_dejson() or {})


def _store_for(conn, extra: dict) -> ObjectStore:
    endpoint = f"{conn.host}:{conn.port}" if conn.port else str(conn.host)
    return ObjectStore.connect(
        endpoint,
        conn.login,
        conn.password,
        secure=bool(extra.get("secure", conn.schema == "https")),
        region=extra.get("region"),
    )


class OcrServiceHook(BaseHook):
    """The OCR service, through ``kb.ocr_client.OcrClient``.

    Connection ``ocr_service``: host and port (schema http or https), password = API key,
    extra ``{"connect_timeout_s", "read_timeout_s", "retries", "backoff_s"}`` (optional) and
    ``{"replicas": ["http://host:port", ...]}``: more instances of the service.
    """

    conn_name_attr = "ocr_conn_id"
    default_conn_name = "ocr_service"
    conn_type = "http"
    hook_name = "KB OCR service"

    def __init__(self, ocr_conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.ocr_conn_id = ocr_conn_id

    def get_conn(self):
        return self.client

    @cached_property
    def client(self):
        from kb.ocr_client import OcrClient

        conn = self.get_connection(self.ocr_conn_id)
        extra = conn.extra_dejson or {}
        scheme = conn.schema or "http"
        base = f"{scheme}://{conn.host}:{conn.port}" if conn.port else f"{scheme}://{conn.host}"
        tuning = {k: extra[k] for k in ("connect_timeout_s", "read_timeout_s", "retries", "backoff_s", "replicas")
                  if k in extra}
        return OcrClient(base, conn.password, **tuning)


# Where page ranges are read decides who states their limits: the OCR service (through
# its hook) or the engine in the task's own process (KB_OCR_MODE).


def range_limits(settings):
    """The ``kb.limits.RangeLimits`` that ``plan`` cuts ranges from."""
    if settings.ocr_mode is OcrMode.SERVICE:
        return OcrServiceHook().client.limits()
    from kb.limits import RangeLimits
    from kb.pipeline.extract import local_engine

    return RangeLimits.from_engine(local_engine())


def range_extractor(settings):
    """What ``extract`` reads a page range with."""
    if settings.ocr_mode is OcrMode.SERVICE:
        from kb.pipeline.extract import ServiceExtractor

        return ServiceExtractor(OcrServiceHook().client, settings)
    from kb.pipeline.extract import engine_extractor

    return engine_extractor
