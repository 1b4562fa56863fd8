"""Stage 2, plan: open each document once, quarantine bad input, cut page ranges.

Ranges are cut from the limits their reader publishes (``RangeLimits``: the OCR service's
``/v1/limits``, or the engine in local mode) and the pipeline's own fan-out caps.
"""

from __future__ import annotations

import hashlib
import logging

from kb.artifacts import ArtifactKeys
from kb.errors import DocumentError
from kb.decisions import Decision
from kb.ledger import LedgerEntry, Status, doc_id_for
from kb.objectstore import ObjectInfo
from kb.limits import RangeLimits
from kb.pipeline.context import Context
from kb.pipeline.messages import DocumentResult, PageRange, Plan, PlannedDocument, Sensed
from kb.pipeline.records import quarantine, record
from kb.pipeline.signature import index_signature
from kb.planning import SCANNED, RangeCaps, classify_pages, cut_ranges
from ocr_engine.api.names import AUTO, Requested, requested
from ocr_engine.api.pdf import open_pdf
from ocr_engine.api.errors import DocumentTooLarge, InputError

log = logging.getLogger(__name__)

BAD_INPUT = (InputError, DocumentError)


def plan(ctx: Context, sensed: Sensed, run_id: str, limits: RangeLimits) -> Plan:
    """``sensed.force`` re-indexes content that is indexed already (extraction is reused,
    except pages an earlier extraction left failed, which are read again)."""
    s = ctx.settings
    caps = RangeCaps.of(s, limits)
    log.info("cutting ranges from %s: %s", limits.source, caps)
    signature = sensed.index_signature or index_signature(s)
    reuse_only_version, reuse_only_ocr_model = _reuse_only(sensed, limits)
    documents: list[PlannedDocument] = []
    ranges: list[PageRange] = []
    quarantined: list[DocumentResult] = []
    skipped: list[dict] = []
    for obj in sensed.todo:
        doc_id = doc_id_for(obj.bucket, obj.key)
        entry = ctx.ledger.get(doc_id)
        # A reviewer's decision on this very version (kb_review) goes with it to extract and
        # index; taken up once, so that a version it does not fix is quarantined, not looped.
        review = entry.current_review if entry and entry.same_version(obj) else None
        if review is not None and review.applied_run is None:
            ctx.ledger.review_applied(doc_id, run_id)
            entry = ctx.ledger.get(doc_id)
        sha = None
        if _read_by_current_rules(sensed, entry, obj, signature, s.collection, limits):
            skipped.append({"doc_id": doc_id, "key": obj.key, "reason": "read_by_current_rules"})
            continue
        try:
            if obj.size > s.max_file_mb * 1024 * 1024:
                raise DocumentTooLarge(f"{obj.size} bytes is over the {s.max_file_mb} MB limit")
            data = ctx.store.get_bytes(obj.bucket, obj.key, obj.version_id)
            sha = hashlib.sha256(data).hexdigest()
            if (not (sensed.force or sensed.reread) and entry and entry.status == Status.INDEXED
                    and entry.indexed_sha256 == sha and entry.index_signature == signature):
                # Same bytes under a new ETag/version (a re-upload): nothing to redo.
                record(ctx, entry, obj, status=Status.INDEXED, sha256=sha, run_id=run_id)
                skipped.append({"doc_id": doc_id, "key": obj.key, "reason": "same_content"})
                continue
            doc = open_pdf(data, max_pages=s.max_pages)
            try:
                kinds = classify_pages(doc, limits.min_text_chars)
            finally:
                doc.close()
        except BAD_INPUT as exc:
            quarantined.append(quarantine(ctx, obj, exc, run_id, sha256=sha))
            continue
        decision = review.decision if review else None
        backend: Requested = AUTO
        if decision == Decision.REEXTRACT_OCR:
            kinds, backend = [SCANNED] * len(kinds), requested(limits.ocr_backend)
        spans = cut_ranges(kinds, caps)
        document = PlannedDocument(
            doc_id=doc_id, bucket=obj.bucket, key=obj.key, etag=obj.etag, size=obj.size, version_id=obj.version_id,
            sha256=sha, page_count=len(kinds), scanned_pages=[i + 1 for i, k in enumerate(kinds) if k == SCANNED],
            ranges=[ArtifactKeys.pages(doc_id, sha, a, b, backend) for a, b in spans],
            decision=str(decision) if decision else None, quality=dict(review.quality) if review else {},
            keep_if_current=sensed.reread and not sensed.force,
        )
        documents.append(document)
        ranges.extend(
            PageRange(doc_id=doc_id, bucket=obj.bucket, key=obj.key, etag=obj.etag, size=obj.size,
                      version_id=obj.version_id, sha256=sha, first=first, last=last, result_key=key,
                      retry_failed=sensed.force or decision in (Decision.REEXTRACT_OCR, Decision.REEXTRACT_LIMITS),
                      backend=backend, reuse_only_version=reuse_only_version, reuse_only_ocr_model=reuse_only_ocr_model)
            for (first, last), key in zip(spans, document.ranges)
        )
    log.info("planned %d documents, %d ranges, %d quarantined, %d skipped",
             len(documents), len(ranges), len(quarantined), len(skipped))
    return Plan(documents=documents, ranges=ranges, quarantined=quarantined, skipped=skipped,
                batches=batch_documents(documents, s.index_batch_pages, s.index_batch_documents),
                limits=limits.as_dict())


def _read_by_current_rules(sensed: Sensed, entry: LedgerEntry | None, obj: ObjectInfo, signature: str,
                           collection: str, limits: RangeLimits) -> bool:
    """In a ``reread`` run (not forced): a document whose indexed version is this very object,
    made the current way from pages the current rules (and, for its OCR pages, the current OCR
    model) read all of, has nothing to read or index again; it is left out before its bytes
    are even fetched. Entries from before they kept extraction versions or OCR models say
    nothing, so those documents go on (and index keeps them if no page of theirs is read again)."""
    return (sensed.reread and not sensed.force and entry is not None and limits.extraction_version is not None
            and entry.status == Status.INDEXED and entry.same_version(obj) and entry.sha256 == entry.indexed_sha256
            and entry.index_signature == signature and entry.collection == collection
            and entry.outdated_reading(limits.extraction_version, limits.ocr_model) is None)


def _reuse_only(sensed: Sensed, limits: RangeLimits) -> tuple[str | None, str | None]:
    """(extraction version, OCR model) whose stored pages a ``reread`` run reuses; None: any."""
    if not sensed.reread:
        return None, None
    if limits.extraction_version is None:  # a reader that does not say its version: nothing to compare
        log.warning("reread asked, but %s publishes no extraction version: stored pages are reused", limits.source)
    if limits.ocr_model is None:
        log.warning("reread asked, but %s does not name its OCR model: stored OCR pages of any model are reused",
                    limits.source)
    return limits.extraction_version, limits.ocr_model


def batch_documents(documents: list[PlannedDocument], max_pages: int, max_documents: int) -> list[list[PlannedDocument]]:
    """Group documents for indexing so each task loads the embedder once for many pages.

    Loading the embedding model costs seconds per task process; a batch amortises it,
    while several batches still index in parallel on a large pool.
    """
    batches: list[list[PlannedDocument]] = []
    pages = 0
    for document in documents:
        if not batches or len(batches[-1]) >= max_documents or pages + document.page_count > max_pages:
            if not batches or batches[-1]:
                batches.append([])
            pages = 0
        batches[-1].append(document)
        pages += document.page_count
    return [b for b in batches if b]
