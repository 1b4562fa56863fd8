"""The ledger and the quarantine: what the stages write down about each document version.

- ``record``: the document's ledger entry, updated.
- ``quarantine``: a version with a defect of its own (bad input, a failed gate, a refusal
  of the document by the OCR service) gets a record under ``quarantine/`` and is not tried
  again until a new version appears.
- ``fail``: a failure that may pass is counted and backed off; after ``max_attempts`` it
  is quarantined too.
- ``record_failed_pages``: a version indexed without some pages keeps a record of which
  and why, for the alert.
"""

from __future__ import annotations

import logging
from typing import Any

from kb.artifacts import AlertEvent, ArtifactKeys
from kb.errors import ValidationFailed
from kb.ledger import LedgerEntry, Status, doc_id_for, next_attempt_iso, now_iso
from kb.objectstore import ObjectInfo
from kb.pipeline.context import Context
from kb.pipeline.messages import DocumentResult, PlannedDocument

log = logging.getLogger(__name__)


def code_of(exc: Exception) -> str:
    return getattr(exc, "code", None) or type(exc).__name__


def record(ctx: Context, entry: LedgerEntry | None, obj: ObjectInfo, **fields: Any) -> LedgerEntry:
    """Set ``fields`` on the document's ledger entry for version ``obj`` (or start one).

    ``entry`` is what the caller read, maybe long ago (an index task reads it before
    embedding); the fields are set on the entry as the ledger holds it now, so what another
    writer did meanwhile (a reviewer's decision) is kept (``Ledger.update``)."""
    def change(current: LedgerEntry | None) -> LedgerEntry:
        new = current or LedgerEntry.new(obj, fields["status"])
        if not new.same_version(obj):
            new.review = None  # a review decides about one version; a new one is undecided
        new.etag, new.version_id, new.size = obj.etag, obj.version_id, obj.size
        for name, value in fields.items():
            setattr(new, name, value)
        return new

    return ctx.ledger.update(doc_id_for(obj.bucket, obj.key), change)


def _base_record(obj: ObjectInfo, run_id: str, sha256: str | None, where: str) -> dict[str, Any]:
    return {"doc_id": doc_id_for(obj.bucket, obj.key), "bucket": obj.bucket, "key": obj.key,
            "version_id": obj.version_id, "etag": obj.etag, "size": obj.size, "sha256": sha256,
            "run_id": run_id, "at": now_iso(), "record": where}


def quarantine(ctx: Context, obj: ObjectInfo, exc: Exception, run_id: str, sha256: str | None = None,
               validation: dict[str, Any] | None = None) -> DocumentResult:
    doc_id = doc_id_for(obj.bucket, obj.key)
    where = ArtifactKeys.quarantine_record(doc_id, obj.version)
    body = {"event": AlertEvent.QUARANTINED.value, "code": code_of(exc), "message": str(exc),
            **_base_record(obj, run_id, sha256, where)}
    if validation is not None:
        body["validation"] = validation
    ctx.store.put_json(ctx.artifacts, where, body)
    record(ctx, ctx.ledger.get(doc_id), obj, status=Status.QUARANTINED, sha256=sha256, run_id=run_id,
           next_attempt_at=None, error={"code": body["code"], "message": body["message"], "record": where})
    log.warning("quarantined %s (%s): %s", obj.key, body["code"], body["message"])
    return DocumentResult(doc_id, obj.key, Status.QUARANTINED, code=body["code"], message=body["message"], record=where)


def quarantine_invalid(ctx: Context, document: PlannedDocument, exc: ValidationFailed, run_id: str) -> DocumentResult:
    """A version that failed a gate: its page results and GX's full validation results go
    beside its quarantine record; Qdrant and the ledger's indexed version stay as they were."""
    obj = document.obj
    gates = []
    for gate in exc.report["gates"]:
        result_key = ArtifactKeys.quarantined_validation(document.doc_id, obj.version, gate["suite"])
        ctx.store.put_json(ctx.artifacts, result_key, gate["result"])
        gates.append({**gate, "result": result_key})  # the record points at the full result
    for key in document.ranges:
        pages = ctx.store.get_json(ctx.artifacts, key)
        if pages is not None:
            ctx.store.put_json(ctx.artifacts, ArtifactKeys.quarantined_pages(document.doc_id, obj.version, key), pages)
    docs_url = next((g["docs_url"] for g in gates if g.get("docs_url")), None)
    artifacts = ArtifactKeys.quarantined_pages_prefix(document.doc_id, obj.version)
    return quarantine(ctx, obj, exc, run_id, document.sha256,
                      validation={"gates": gates, "docs_url": docs_url, "artifacts": artifacts})


def fail(ctx: Context, obj: ObjectInfo, entry: LedgerEntry | None, exc: Exception, run_id: str,
         sha256: str | None) -> DocumentResult:
    """A failure that may pass: counted and backed off, quarantined once it keeps happening."""
    s = ctx.settings
    attempts = (entry.attempts if entry and entry.same_version(obj) else 0) + 1
    if attempts >= s.max_attempts:
        return quarantine(ctx, obj, exc, run_id, sha256)
    retry_at = next_attempt_iso(attempts, s.retry_backoff_s, s.retry_backoff_max_s)
    record(ctx, entry, obj, status=Status.FAILED, sha256=sha256, run_id=run_id, attempts=attempts,
           next_attempt_at=retry_at, error={"code": code_of(exc), "message": str(exc)})
    log.warning("failed %s (attempt %d of %d, next not before %s): %s", obj.key, attempts, s.max_attempts,
                retry_at, exc)
    return DocumentResult(doc_id_for(obj.bucket, obj.key), obj.key, Status.FAILED, code=code_of(exc),
                          message=str(exc), attempts=attempts, next_attempt_at=retry_at)


def record_failed_pages(ctx: Context, document: PlannedDocument, failed_pages: list[dict[str, Any]],
                        run_id: str) -> str:
    """Which pages a version was indexed without, and why; the alert is built from it."""
    obj = document.obj
    where = ArtifactKeys.failed_pages_record(document.doc_id, obj.version)
    ctx.store.put_json(ctx.artifacts, where, {
        "event": AlertEvent.PAGES_FAILED.value, "code": "pages_failed",
        "message": f"indexed without {len(failed_pages)} of {document.page_count} pages",
        "failed_pages": failed_pages, **_base_record(obj, run_id, document.sha256, where),
    })
    return where
