"""The service's configuration: ``OCR_SERVICE_*`` variables (templates in include/config/)."""

from __future__ import annotations

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from typing_extensions import Annotated


class ServiceSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="OCR_SERVICE_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = 8090
    # Comma-separated; several keys let a key be rotated without downtime. Empty: no auth
    # (refused unless allow_no_auth, so a forgotten setting cannot open the service).
    api_keys: Annotated[list[SecretStr], NoDecode] = Field(default_factory=list)
    allow_no_auth: bool = False
    auth_health: bool = False  # do /health, /ready and /metrics need a key too?

    # The service owns these limits and publishes them at GET /v1/limits; clients cut
    # their page ranges from what it says there, never from a copy of these defaults.
    max_file_mb: float = Field(100, gt=0)
    max_pages_per_request: int = Field(50, ge=1)
    # The engine's own time on one request. Waiting for the engine is not part of it: a
    # range that waited behind others is not too big, and is answered 429 (retry), not 504.
    request_timeout_s: float = Field(120, gt=0)
    max_concurrency: int = Field(2, ge=1)
    max_queue: int = Field(8, ge=0, description="requests waiting for a slot before 429")
    queue_timeout_s: float = Field(120, gt=0, description="longest wait for the engine before 429")
    retry_after_s: int = 2
    drain_timeout_s: float = 30.0

    # The service's own credentials for s3:// references.
    s3_endpoint: str | None = None
    s3_access_key: SecretStr | None = None
    s3_secret_key: SecretStr | None = None
    s3_secure: bool = False

    warmup: bool = True

    # Cost accounting: with a price per hour of the device, /metrics shows the cost of
    # 1,000 OCR pages (ocr_cost_per_1000_pages). None: not shown.
    gpu_cost_per_hour: float | None = Field(None, ge=0)

    @property
    def max_file_bytes(self) -> int:
        return int(self.max_file_mb * 1024 * 1024)

    @field_validator("api_keys", mode="before")
    @classmethod
    def _split(cls, value):
        if isinstance(value, str):
            return [k.strip() for k in value.split(",") if k.strip()]
        return value
