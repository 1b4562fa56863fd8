"""Configuration: one settings class per component, all read from ``KB_*`` variables.

Secrets (S3 keys, the Airflow password) are never defaults here: a deployment gives them
through the environment or Airflow connections (``kb up`` generates its own; the local
stack's settings are ``kb_dev.settings.StackSettings``).
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from typing_extensions import Annotated

from kb.embedding_profiles import EmbedProfile


def default_state_dir() -> Path:
    return Path.cwd() / ".kb"


class OcrMode(StrEnum):
    SERVICE = "service"  # page ranges go to the OCR service (Airflow connection `ocr_service`)
    LOCAL = "local"  # the engine runs inside the extract task (text layer, else PP-OCR on CPU)


class PipelineSettings(BaseSettings):
    """What the ingestion pipeline does: buckets, ranges, chunking, embedding, store."""

    model_config = SettingsConfigDict(env_prefix="KB_", extra="ignore")

    state_dir: Path = Field(default_factory=default_state_dir)

    inbox_bucket: str = "inbox"
    # Ledger, page results, quarantine records and run summaries live here, so a
    # worker on any machine sees the same durable state.
    artifacts_bucket: str = "kb-artifacts"

    schedule: str | None = "*/5 * * * *"
    max_file_mb: int = 200
    max_pages: int = 2000
    # Where page ranges are read (``OcrMode``)
    ocr_mode: OcrMode = OcrMode.LOCAL
    # Page ranges. The OCR service (or, in local mode, the engine) owns the hard limits:
    # pages and bytes per request, its timeout, the token budget and its measured seconds
    # per page; `plan` reads them and cuts ranges that fit all of them. The two caps here
    # are this pipeline's own choice of fan-out, applied below those limits.
    max_pages_per_range: int = Field(16, ge=1, description="pages of a range that needs OCR, at most")
    # A range whose every page has a usable text layer costs milliseconds a page, so bigger
    # ranges save the per-task overhead that would dominate.
    max_textlayer_pages_per_range: int = Field(64, ge=1)
    # A range's expected seconds (pages x the service's seconds per page of their kind)
    # stay under this share of the service's request timeout.
    range_time_share: float = Field(0.5, gt=0, le=1)
    # A range refused for size (413: pages, bytes or KV cache) or time (504), or with truncated,
    # repeated or failed pages, is split in halves down to single pages. Off only to see
    # what happens without it.
    split_ranges: bool = True
    max_attempts: int = Field(3, ge=1, description="failed runs of one version before quarantine")
    # After a failed attempt a version waits before the next: base x 2^(attempts-1), capped,
    # so a stuck document does not take the OCR pool on every scheduled run.
    # Airflow's own retry of a failed task (one retry), for what fails inside a run: a
    # worker lost, an API call timed out. The backoff below is between runs.
    retry_delay_s: float = Field(15, ge=0)
    retry_backoff_s: float = Field(600, ge=0)
    retry_backoff_max_s: float = Field(6 * 3600, ge=0)
    # What one GPU-hour costs (any currency): the run summary's OCR accounting turns its
    # device seconds into `cost_per_1000_pages` with it. None (or empty): no cost shown.
    gpu_cost_per_hour: float | None = Field(None, ge=0)
    # A run retires (drops from the index) at most this share of the indexed documents
    # under its prefix, and always at least one; past it, it retires none and alerts: an
    # empty or partial listing must not empty the knowledge base. A forced run retires all.
    max_retire_share: float = Field(0.5, ge=0, le=1)
    # Artifacts of deleted and superseded versions (their page results, the contents of their
    # quarantine folders, their old inbox object versions) are removed this many days after
    # the retention sweep first finds nothing needing them. 0: at the next run's sweep.
    # Ledger, quarantine and alert records and run summaries are kept.
    artifact_retention_days: float = Field(30, ge=0)
    # the most object versions one run's sweep removes; the rest wait for the next run
    retention_sweep_objects: int = Field(5000, ge=1)
    # The promise to the users: a document is searchable within this many seconds of landing.
    # kb_ingest states it as an Airflow deadline alert (counted from when its run was queued);
    # a run past it alerts once on the configured channels and leaves a record under alerts/.
    searchable_within_s: float = Field(3600, gt=0)

    chunk_max_tokens: int = Field(200, ge=16)
    chunk_overlap_sentences: int = Field(1, ge=0)

    index_batch_pages: int = Field(400, ge=1, description="pages per indexing task (one embedder load)")
    index_batch_documents: int = Field(50, ge=1)

    embed_model_dir: Path | None = None  # None: the all-MiniLM-L6-v2 wheel
    # The model's family (``kb.embedding_profiles.PROFILES``: e5, bge, gte, plain), for the
    # query and passage prefixes, pooling and normalisation that its folder does not declare
    # itself. None: the folder's own files alone. Changing the prefixes re-embeds once.
    embed_profile: EmbedProfile | None = None
    # Where the ONNX export of the embedder is kept, under the model's name and weights digest
    # (None: <state dir>/models). Exporting loads torch and takes seconds (8 s here), once per
    # folder: workers that share a state folder, or a volume named here, export it once.
    embed_cache_dir: Path | None = None
    # "onnx": the folder's model exported once to ONNX (cached in embed_cache_dir) and
    # run by ONNX Runtime, no torch at query time; "torch": sentence-transformers. The two
    # have different index signatures, so switching re-embeds every document once.
    embed_backend: str = Field("onnx", pattern="^(onnx|torch)$")
    # Chunks per embedding call. Attention memory grows with batch x 256^2 and ONNX
    # Runtime's arena keeps its peak: a 1,000-page document's index task peaked at 1,535 MB
    # with 64; embedding 1,200 chunks took 1,242 MB at 27.5 chunks/s with 64, 505 MB at
    # 34.5 chunks/s with 16 (2 cores, same run).
    embed_batch_size: int = Field(16, ge=1)
    # CJK terms of the sparse vectors: "bigram" (character bigrams) or "jieba" (the jieba
    # segmenter). Changing it, or the embedder, re-indexes every document on the next run.
    sparse_tokenizer: str = Field("bigram", pattern="^(bigram|jieba)$")
    search_mode: str = Field("hybrid", pattern="^(hybrid|dense|sparse)$")
    # Languages the dense model was trained on (MiniLM: English). In hybrid search a query
    # in another language gets its dense ranks weighted down in Qdrant's RRF, since an
    # English-only model's ranking of Chinese text is close to noise. A multilingual model
    # folder comes with KB_DENSE_LANGUAGES='["en","zh"]'.
    dense_languages: list[str] = Field(default_factory=lambda: ["en"])
    offlanguage_dense_weight: float = Field(0.5, ge=0, le=1)

    # A Qdrant server; None: the embedded store (Qdrant Edge) under <state dir>/store
    qdrant_url: str | None = None
    # where an older version kept qdrant-client's local-mode store (moved into the embedded
    # store once, by `kb up` or `kb store migrate`)
    qdrant_path: Path | None = None
    qdrant_api_key: SecretStr | None = None
    collection: str = "kb_chunks"

    # The ledger's database (SQLAlchemy URL): Postgres in its own database when distributed,
    # e.g. postgresql+psycopg2://kb_ledger:...@db/kb_ledger; None: SQLite in the state folder.
    # A secret (it may hold a password): never logged.
    ledger_url: SecretStr | None = None

    @field_validator("gpu_cost_per_hour", "embed_profile", mode="before")
    @classmethod
    def _empty_is_unset(cls, value):
        # compose passes `${KB_GPU_COST_PER_HOUR:-}` through as "" when .env leaves it out
        return None if isinstance(value, str) and not value.strip() else value

    @property
    def resolved_embed_cache_dir(self) -> Path:
        return self.embed_cache_dir or self.state_dir / "models"

    @property
    def resolved_qdrant_path(self) -> Path:
        """Where qdrant-client's local mode kept the store before Qdrant Edge (what
        ``kb store migrate`` reads)."""
        return self.qdrant_path or self.state_dir / "qdrant"

    @property
    def store_dir(self) -> Path:
        """The embedded store: its write log and its Edge shards (``kb.store``)."""
        return self.state_dir / "store"

    @property
    def resolved_ledger_url(self) -> str:
        if self.ledger_url is not None:
            return self.ledger_url.get_secret_value()
        return f"sqlite:///{self.state_dir / 'ledger.db'}"


class S3Settings(BaseSettings):
    """Where the object store is and how to log in (MinIO in production, weed locally)."""

    model_config = SettingsConfigDict(env_prefix="KB_S3_", extra="ignore")

    endpoint: str = "127.0.0.1:8333"
    access_key: SecretStr | None = None
    secret_key: SecretStr | None = None
    secure: bool = False
    region: str | None = None


class QualitySettings(BaseSettings):
    """Data-quality thresholds (``KB_QUALITY_*``); a run may override any of them through
    the DAG param ``quality`` (``{"max_empty_page_share": 0.5}``)."""

    model_config = SettingsConfigDict(env_prefix="KB_QUALITY_", extra="ignore")

    # pages, after OCR
    max_empty_page_share: float = Field(0.5, ge=0, le=1, description="share of pages with no text")
    # A page that failed alone (split down to one page and still refused, truncated or
    # failed) is left out; a document may lose this share of its pages and still be indexed.
    max_failed_page_share: float = Field(0.05, ge=0, le=1)
    min_mean_confidence: float = Field(0.6, ge=0, le=1, description="mean OCR confidence, where the backend gives one")
    distinct_n: int = Field(20, ge=2)
    min_distinct_ratio: float = Field(0.3, ge=0, le=1, description="distinct-n per page; loops drive it to 0")
    min_page_chars: int = Field(0, ge=0, description="characters on a page that is not empty")
    max_page_chars: int = Field(20_000, ge=1)
    max_cer: float = Field(0.35, ge=0, description="OCR vs text layer, on the pages audited")
    # OCR one text-layer page per range and compare it with the text layer: a standing
    # accuracy check on real documents, at one extra OCR page per range.
    cer_audit: bool = False

    # chunks, before upsert
    # (the chunks gate bounds a chunk's tokens by the embedder's window; the chunker's own
    # target size is KB_CHUNK_MAX_TOKENS)
    min_vector_norm: float = Field(1e-6, ge=0)

    # Data Docs: a local folder (None: <state dir>/data_docs)
    data_docs_dir: Path | None = None

    @classmethod
    def with_overrides(cls, overrides: dict | None) -> "QualitySettings":
        """Settings from the environment, then a run's overrides; unknown names are an error."""
        from kb.errors import BadParams

        overrides = dict(overrides or {})
        unknown = sorted(set(overrides) - set(cls.model_fields) - {"data_docs_dir"})
        if unknown:
            raise BadParams(f"unknown quality setting(s) {unknown}; known: {sorted(cls.model_fields)}")
        if "data_docs_dir" in overrides:
            raise BadParams("data_docs_dir is a deployment setting, not a per-run threshold")
        from pydantic import ValidationError

        try:
            return cls(**overrides)
        except ValidationError as exc:
            raise BadParams(f"bad quality threshold: {exc.errors()[0]['loc']} {exc.errors()[0]['msg']}") from None


class AlertSettings(BaseSettings):
    """Where ops alerts go (``KB_ALERT_*``). The channels themselves are Airflow connections,
    so addresses and webhook secrets live with the other secrets, not here."""

    model_config = SettingsConfigDict(env_prefix="KB_ALERT_", extra="ignore")

    smtp_conn_id: str = "kb_alerts_smtp"
    webhook_conn_id: str = "kb_alerts_webhook"
    email_to: list[str] = Field(default_factory=lambda: ["ops@localhost"])
    email_from: str | None = None  # None: the connection's from_email
    webhook_timeout_s: float = 10.0
    # KBQuarantineShareHigh pages above this share of the hour's decided documents. The rule
    # file and the dashboard are rendered from it: python -m kb_dev.observe.alert_rules.
    quarantine_share: float = Field(0.2, gt=0, lt=1)


class StoreSettings(BaseSettings):
    """The embedded store (``KB_STORE_*``): Qdrant Edge shards and the log writers append to.
    A Qdrant server (``KB_QDRANT_URL``) is configured on the server and ignores these."""

    model_config = SettingsConfigDict(env_prefix="KB_STORE_", extra="ignore")

    # Copies of the shard the search service keeps, each in a process of its own. Building
    # HNSW (``optimize``) holds its process for as long as it runs, so with two, one answers
    # while the other builds; with one, queries wait for each build (minutes at a million).
    replicas: int = Field(2, ge=1, le=4)
    # A replica builds HNSW for new points once this many are in plain segments (a query
    # scans those: ~2 ms per 20,000) and the other replica answers meanwhile.
    optimize_min_points: int = Field(20_000, ge=1)
    # HNSW and int8 quantization (the originals on disk rescore the candidates: exact scores).
    # Recall@10 against exact search at 100,000 chunks (kb bench scale's chunks, the eval
    # questions as queries): m=16/ef_construct=100 0.86 at ef 128; m=32/200 0.97 at ef 256;
    # m=32/400 0.984 at ef 256, 0.993 at ef 512 (3.2 ms), its build 122 s a 100,000 on 2 cores.
    # At 1,000,000: 0.95 at ef 512, 0.983 at ef 1024 (17 ms), 0.996 at ef 2048 (31 ms).
    quantize: bool = True
    hnsw_m: int = Field(32, ge=4)
    hnsw_ef_construct: int = Field(400, ge=8)
    hnsw_ef: int = Field(1024, ge=8)
    # A filter that leaves at most this many points is searched exhaustively (the int8 copies,
    # the best rescored): at 1,000,000 points, a folder of 10,000 took 5.4 ms and was exact,
    # where HNSW with the filter took 25-45 ms (p99 over a second when cold).
    exact_search_below: int = Field(50_000, ge=0)
    oversampling: float = Field(2.0, ge=1)
    full_scan_threshold_kb: int = Field(10_000, ge=1)
    indexing_threshold_kb: int = Field(20_000, ge=1)
    # Many segments rather than few: merging rebuilds the merged segments' graphs, so the
    # optimizer merges only the smallest, up to segments of max_segment_kb.
    segments: int = Field(8, ge=0)
    max_segment_kb: int = Field(400_000, ge=1000)
    search_threads: int | None = Field(None, ge=1)
    # How often a replica looks for new log entries; how long a writer waits for one to be
    # applied (searchable) before it goes on (the entry stays in the log: it is applied later).
    poll_s: float = Field(0.1, gt=0)
    visible_timeout_s: float = Field(10.0, ge=0)
    # A query the chosen replica does not answer within this is asked of another.
    replica_timeout_s: float = Field(2.0, gt=0)


class SearchSettings(BaseSettings):
    """The search service (``KB_SEARCH_*``): where it listens, who may ask, its limits."""

    model_config = SettingsConfigDict(env_prefix="KB_SEARCH_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = 8070
    # Comma-separated, so a key can be rotated without downtime. `kb up` generates one into
    # the secrets file unless the environment gives it. Empty: refused, unless allow_no_auth.
    api_key: Annotated[list[SecretStr], NoDecode] = Field(default_factory=list)
    allow_no_auth: bool = False
    auth_health: bool = False  # do /health, /ready and /metrics need a key too?
    # The query's text goes into the logs only with this on (debugging).
    log_queries: bool = False
    max_query_chars: int = Field(2000, ge=1)
    max_top_k: int = Field(50, ge=1)
    # Request bodies over this are answered 413 before they are read (a search body is a
    # query of max_query_chars, 12 bytes a character at worst as JSON escapes, and a filter).
    max_body_bytes: int = Field(64 * 1024, ge=1024)
    # Page images: rendered at this dpi, within this many pixels whatever size the page claims.
    page_dpi: int = Field(110, ge=36, le=300)
    max_page_pixels: int = Field(4_000_000, ge=100_000)
    # The largest document a page image is drawn from (read at most this much), page images
    # drawn at once, and requests that may wait for one before 429.
    max_page_source_mb: float = Field(200, gt=0)
    page_renders: int = Field(1, ge=1)
    page_queue: int = Field(8, ge=0)
    # ONNX Runtime threads per query: queries are short and arrive together, so one thread
    # each beats several threads fighting over two cores (4.0 vs 4.6 ms a query at 4 at once).
    embed_threads: int = Field(1, ge=1)
    # The service's own read-only S3 identity, for page images (falls back to KB_S3_*).
    s3_access_key: SecretStr | None = None
    s3_secret_key: SecretStr | None = None

    @field_validator("api_key", mode="before")
    @classmethod
    def _split(cls, value):
        if isinstance(value, str):
            return [k.strip() for k in value.split(",") if k.strip()]
        return value


class ReviewSettings(BaseSettings):
    """The review queue (``KB_REVIEW_*``): kb_review's human-in-the-loop task."""

    model_config = SettingsConfigDict(env_prefix="KB_REVIEW_", extra="ignore")

    # How long a kb_review run waits for a reviewer's answer; past it the run fails saying so,
    # and the document stays quarantined and in the queue. Read when the DAG is parsed.
    answer_timeout_s: float = Field(3 * 24 * 3600, gt=0)
    # Airflow users (their ids: user names under the simple auth manager) who may answer a
    # review, comma-separated; Airflow refuses anyone else (403). Empty: any user Airflow lets
    # change the DAG's human-in-the-loop tasks (the local stack's own user).
    reviewers: Annotated[list[str], NoDecode] = Field(default_factory=list)

    @field_validator("reviewers", mode="before")
    @classmethod
    def _split_reviewers(cls, value):
        if isinstance(value, str):
            return [name.strip() for name in value.split(",") if name.strip()]
        return value


class WatchSettings(BaseSettings):
    """Event-driven sensing (``KB_WATCH_*``): a watcher in the Airflow triggerer lists the inbox
    bucket and starts ``kb_ingest`` within seconds of a change. The cron schedule
    (``KB_SCHEDULE``) stays, as the reconciliation pass that catches whatever a watcher missed."""

    model_config = SettingsConfigDict(env_prefix="KB_WATCH_", extra="ignore")

    # Off unless enabled, so that runs start only when asked (tests upload files and start
    # runs by hand); a deployment turns it on with KB_WATCH_INBOX=true.
    inbox: bool = False
    interval_s: float = Field(5.0, gt=0, description="seconds between two listings of the inbox")
    # A change fires once the listing has held still for one interval, so a burst of uploads
    # is one event and one run; a listing that keeps changing fires after this long anyway.
    max_delay_s: float = Field(60.0, gt=0)


class ExporterSettings(BaseSettings):
    """The pipeline's metrics exporter and, on the local stack, the StatsD bridge that turns
    Airflow's StatsD metrics into Prometheus series (``KB_EXPORTER_*``)."""

    model_config = SettingsConfigDict(env_prefix="KB_EXPORTER_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = 8096
    # A scrape is answered from a snapshot at most this old (a listing of the inbox each time
    # would let several scrapers multiply the load on S3 and the ledger).
    min_interval_s: float = Field(10.0, ge=0)
    # Its own read-only S3 identity (falls back to KB_S3_*): it lists the inbox and reads run summaries.
    s3_access_key: SecretStr | None = None
    s3_secret_key: SecretStr | None = None
    # The bridge: StatsD over UDP in, Prometheus text out; the same mapping file compose's
    # statsd_exporter reads.
    statsd_port: int = 9125
    statsd_http_port: int = 8097
    statsd_mapping: Path = Path(__file__).resolve().parents[1] / "config" / "statsd-mapping.yml"
