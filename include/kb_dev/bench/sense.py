"""Sensing cost at size: ``sense`` over a bucket of N objects with N ledger rows.

``kb bench sense`` starts an S3 server (weed) of its own on free loopback ports, fills a
versioned inbox with N tiny objects and the ledger with N matching indexed rows, changes a
few (new objects, new versions, a delete), then times the real ``kb.pipeline.sense``
stage and counts what it sent: S3 requests by kind (through a counting urllib3 pool given
to the minio client) and SQL statements (SQLAlchemy's cursor events).
"""

from __future__ import annotations

import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

import urllib3


class CountingPool(urllib3.PoolManager):
    """A urllib3 pool that counts requests: ``list`` (bucket listings) and the others."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: Counter[str] = Counter()
        self.counting = False

    def urlopen(self, method: str, url: str, *args: Any, **kwargs: Any):
        if self.counting:
            parts = urlsplit(url)
            path = parts.path.strip("/")
            # a GET on the bucket itself (no key) with list parameters is a listing
            is_list = method == "GET" and "/" not in path and any(
                q in parts.query for q in ("versions", "list-type", "prefix", "delimiter"))
            self.calls["list" if is_list else f"{method} other"] += 1
        return super().urlopen(method, url, *args, **kwargs)


def _fill(store, bucket: str, keys: list[str], threads: int = 8) -> None:
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda k: store.put_bytes(bucket, k, k.encode()), keys))


def bench_sense(objects: int = 20_000, ledger_url: str | None = None,
                echo: Callable[[str], None] = print) -> dict[str, Any]:
    from sqlalchemy import event

    from kb.ledger import LedgerEntry, Status
    from kb.ledger_db import Ledger, sqlite_url
    from kb.objectstore import ObjectInfo, ObjectStore
    from kb.pipeline.context import Context
    from kb.pipeline.sense import sense
    from kb.pipeline.signature import index_signature
    from kb.settings import PipelineSettings
    from kb_dev.ports import weed_port_set
    from kb_dev.settings import StackSettings
    from kb_dev.stack import s3 as s3_part
    from kb_dev.stack.secrets import ensure_secrets

    signature_started = time.perf_counter()
    signature = index_signature(PipelineSettings())  # the embedder's digest (an ONNX export the first time)
    signature_s = time.perf_counter() - signature_started

    with tempfile.TemporaryDirectory(prefix="kb-bench-sense-") as tmp:
        state = Path(tmp)
        ports = weed_port_set()
        s3 = StackSettings(state_dir=state, **ports)
        secrets_ = ensure_secrets(state)
        s3_part.start(s3, secrets_)
        try:
            pool = CountingPool(timeout=urllib3.Timeout(connect=5, read=60), maxsize=16,
                                retries=urllib3.Retry(total=3, backoff_factor=0.2, status_forcelist=[500, 502, 503, 504]))
            store = ObjectStore.connect(s3_part.endpoint(s3), secrets_["KB_S3_ACCESS_KEY"],
                                        secrets_["KB_S3_SECRET_KEY"], http_client=pool)
            settings = PipelineSettings(state_dir=state, ledger_url=ledger_url or sqlite_url(state / "ledger.db"),
                                        inbox_bucket="bench-inbox", artifacts_bucket="bench-artifacts")
            store.ensure_bucket(settings.inbox_bucket, versioned=True)
            store.ensure_bucket(settings.artifacts_bucket)
            keys = [f"docs/{i // 1000:03d}/doc-{i:06d}.pdf" for i in range(objects)]
            echo(f"uploading {objects:,} objects ...")
            started = time.perf_counter()
            _fill(store, settings.inbox_bucket, keys)
            upload_s = time.perf_counter() - started
            ledger = Ledger.for_settings(settings, store)
            # N rows as a run between two changes leaves them: all indexed at the listed
            # version, except what changed since: 3 new objects (no row), 2 new versions (a
            # row with the old ETag), 3 objects removed (a row, no object). The bucket keeps
            # one version per object, so the listing is N versions: N/1,000 pages.
            rows = []
            for i, obj in enumerate(store.list_latest(settings.inbox_bucket)):
                if i < 3:
                    continue  # new
                entry = LedgerEntry.new(obj, Status.INDEXED)
                entry.index_signature = signature
                if i < 5:
                    entry.etag, entry.version_id = "an-older-etag", "an-older-version"  # changed
                rows.append(entry)
            for i in range(3):  # gone from the bucket
                gone = LedgerEntry.new(ObjectInfo(settings.inbox_bucket, f"removed/doc-{i}.pdf", "e", 1, "v"),
                                       Status.INDEXED)
                gone.index_signature = signature
                rows.append(gone)
            ledger.put_many(rows)

            statements: Counter[str] = Counter()
            event.listen(ledger.engine, "before_cursor_execute",
                         lambda conn, cursor, stmt, params, context, many: statements.update([stmt.split()[0].upper()]))
            ctx = Context(store, settings)
            ctx.ledger  # noqa: B018  (opened before timing, as a worker's process has it)
            pool.calls.clear()
            pool.counting = True
            started = time.perf_counter()
            sensed = sense(ctx)
            seconds = time.perf_counter() - started
            pool.counting = False
            sql = dict(statements)  # before the separate timings below add theirs
            # the two halves, once more, apart: the bucket listing alone, then the query alone
            started = time.perf_counter()
            listing = list(store.list_latest(settings.inbox_bucket))
            list_s = time.perf_counter() - started
            started = time.perf_counter()
            ctx.ledger.changes(settings.inbox_bucket, "", listing, settings.max_attempts, signature)
            query_s = time.perf_counter() - started
        finally:
            s3_part.stop(s3)
    return {
        "objects": objects, "ledger_rows": len(rows), "sense_s": round(seconds, 3),
        "list_alone_s": round(list_s, 3), "ledger_query_alone_s": round(query_s, 3),
        "s3_list_calls": pool.calls["list"], "s3_other_requests": sum(n for k, n in pool.calls.items() if k != "list"),
        "sql_statements": sql, "sql_selects": sql.get("SELECT", 0),
        "found": {"todo": len(sensed.todo), "unchanged": sensed.unchanged, "deleted": len(sensed.deleted)},
        "ledger": "postgres" if ledger_url and ledger_url.startswith("postgres") else "sqlite",
        "upload_s": round(upload_s, 1), "signature_s": round(signature_s, 2),
    }
