"""Stage 4, index (one mapped task per batch of documents): gate, chunk, embed, upsert.

The pages gate runs before chunking and the chunks gate before the upsert; a document
that fails one is quarantined and its older indexed version stays searchable. Pages
that failed alone are left out, within the gate's share. Points have deterministic ids
and a new version replaces the old one's only after it is in, so a rerun changes
nothing and no document is ever half gone. ``retire`` drops documents deleted from the
inbox.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from kb import failpoints
from kb.chunking import Chunk, chunk_document
from kb.embedding import TextEmbedder, make_embedder
from kb.errors import IncompleteExtraction, StorageUnavailable, ValidationFailed
from kb.decisions import Decision
from kb.ledger import LedgerEntry, Status
from kb.objectstore import ObjectInfo
from kb.pipeline.accounting import OcrUsage, is_ocr_page
from kb.pipeline.context import Context
from kb.pipeline.messages import DocumentResult, PlannedDocument, RangeResult, failed_pages
from kb.pipeline.records import fail, quarantine_invalid, record, record_failed_pages
from kb.pipeline.signature import signature_of
from kb.points import chunk_payload, point_id
from kb.reading import read_document
from kb.sparse import SparseEncoder, SparseVector
from ocr_engine.api.pages import PageResult, PageStatus

log = logging.getLogger(__name__)


@dataclass
class LoadedPages:
    pages: list[PageResult]  # in page order
    ranges_split: int
    extract_seconds: float
    pages_read: int = 0  # by this run's extract tasks (the rest reused from earlier runs)

    @property
    def extraction_versions(self) -> list[str]:
        return sorted({p.extraction_version or "" for p in self.pages})

    @property
    def ocr_models(self) -> list[str]:
        return sorted({p.ocr_model for p in self.pages if p.ocr_model is not None})

    @property
    def ocr_pages(self) -> int:
        return sum(1 for p in self.pages if is_ocr_page(p))

    @property
    def usage(self) -> OcrUsage:
        return OcrUsage.of_pages(self.pages)

    @property
    def by_backend(self) -> dict[str, int]:
        """Pages that were read (not failed), by the backend that read them."""
        return dict(Counter(p.backend or "unknown" for p in self.pages if not p.is_failed))

    @property
    def failed(self) -> list[dict[str, Any]]:
        return failed_pages(self.pages)


@dataclass
class Prepared:
    document: PlannedDocument
    loaded: LoadedPages
    ids: list[str]
    vectors: Any  # (chunks, dimension) float32
    sparse: list[SparseVector]
    payloads: list[dict[str, Any]]
    pages_without_text: int
    seconds: float


def load_pages(ctx: Context, document: PlannedDocument, run_id: str | None = None) -> LoadedPages:
    pages: list[PageResult] = []
    missing, splits, seconds, read = [], 0, 0.0, 0
    for key in document.ranges:
        stored = ctx.store.get_json(ctx.artifacts, key)
        if stored is None:
            missing.append(key)
            continue
        result = RangeResult.from_dict(stored)
        pages.extend(result.pages)
        splits += result.splits
        seconds += result.seconds
        read += len(result.pages) if run_id is not None and result.run_id == run_id else 0
    if missing:
        raise IncompleteExtraction(f"{len(missing)} page range(s) have no result: {missing[:3]}")
    return LoadedPages(sorted(pages, key=lambda p: p.page), splits, round(seconds, 3), read)


def _gate(ctx: Context, document: PlannedDocument, suite: str, frame, expectations: list) -> dict[str, Any]:
    """Validate ``frame``; raises ValidationFailed with the gate's report when it fails."""
    from kb.artifacts import safe
    from kb.quality.gate import validate

    docs_dir = ctx.quality.data_docs_dir or ctx.settings.state_dir / "data_docs"
    report = validate(frame, suite, expectations, f"{safe(document.key)}@{document.sha256[:12]}", docs_dir)
    gate = report.as_dict()
    for failure, f in zip(gate["failures"], report.failures):
        failure["line"] = f.line()
    if not report.success:
        raise ValidationFailed(f"{len(report.failures)} {suite} expectation(s) failed: "
                               f"{'; '.join(f.line() for f in report.failures)}", {"gates": [gate]})
    return gate


def document_context(ctx: Context, document: PlannedDocument) -> Context:
    """The run's context, with a reviewer's quality overrides for this document alone."""
    if not document.quality:
        return ctx
    from dataclasses import replace

    return replace(ctx, quality=ctx.quality.model_copy(update=document.quality))


def check_pages(ctx: Context, document: PlannedDocument, pages: list[PageResult]) -> dict[str, Any] | None:
    """The pages gate, before chunking. A version a reviewer accepted as it is skips it:
    its failed and empty pages are left out, the pages that passed are indexed."""
    from kb.quality.measures import page_frame
    from kb.quality.suites import pages_suite

    if document.decision == Decision.ACCEPT:
        log.info("%s: accepted by a reviewer; the pages gate is not applied", document.key)
        return None

    frame = page_frame(pages, ctx.quality.distinct_n)
    return _gate(ctx, document, "pages", frame, pages_suite(ctx.quality, document.page_count, frame))


def check_chunks(ctx: Context, p: Prepared, dimension: int, max_tokens: int) -> dict[str, Any]:
    """The chunks gate, against the dimension of the collection the chunks go into."""
    from kb.quality.measures import chunk_frame
    from kb.quality.suites import chunks_suite

    frame = chunk_frame(p.ids, p.payloads, p.vectors)
    return _gate(ctx, p.document, "chunks", frame, chunks_suite(ctx.quality, dimension, max_tokens))


def chunk_pages(pages: list[PageResult], embedder: TextEmbedder, settings) -> list[Chunk]:
    """A document's page results (failed pages left out) read as one document and chunked
    within the embedder's window: what index embeds, and what the benchmarks measure."""
    return chunk_document(
        read_document([p for p in pages if not p.is_failed]),
        embedder.count_tokens,
        max_tokens=min(settings.chunk_max_tokens, embedder.max_tokens - 8),
        overlap_sentences=settings.chunk_overlap_sentences,
    )


def prepare(ctx: Context, document: PlannedDocument, embedder: TextEmbedder, loaded: LoadedPages,
            started: float | None = None) -> Prepared:
    """Pages checked, chunked and embedded: everything but the writes."""
    started = time.perf_counter() if started is None else started
    ctx = document_context(ctx, document)
    check_pages(ctx, document, loaded.pages)
    chunks = chunk_pages(loaded.pages, embedder, ctx.settings)
    texts = [c.embedding_text() for c in chunks]
    vectors = embedder.embed_documents(texts)
    encoder = SparseEncoder(ctx.settings.sparse_tokenizer)
    sparse = [encoder.encode_document(t) for t in texts]
    payloads = [chunk_payload(document, c, embedder.model_id) for c in chunks]
    ids = [point_id(document.doc_id, document.sha256, c.index) for c in chunks]
    empty = len([p for p in loaded.pages if p.status == PageStatus.EMPTY])
    return Prepared(document, loaded, ids, vectors, sparse, payloads, empty, time.perf_counter() - started)


def _current(ctx: Context, document: PlannedDocument, entry: LedgerEntry | None, loaded: LoadedPages,
             embedder_id: str) -> bool:
    """A ``reread`` run's document that read no page again, and whose points are this very
    version's, made with the current embedder, sparse scheme and chunking into the current
    collection: indexing it again would write the same points (ids are stable), so it is
    kept. A forced run indexes it anyway: force is how an index in doubt is repaired."""
    s = ctx.settings
    return (document.keep_if_current and loaded.pages_read == 0 and entry is not None
            and entry.status == Status.INDEXED and entry.indexed_sha256 == document.sha256
            and entry.index_signature == signature_of(embedder_id, s.sparse_tokenizer)
            and entry.collection == s.collection)


def _kept(ctx: Context, document: PlannedDocument, entry: LedgerEntry, loaded: LoadedPages) -> DocumentResult:
    """The entry learns its pages' extraction versions and OCR models, so that the next
    reread leaves the document out in plan, before fetching it."""
    log.info("kept %s: no page read again, its points are current", document.key)
    record(ctx, entry, document.obj, extraction_versions=loaded.extraction_versions, ocr_models=loaded.ocr_models)
    return DocumentResult(document.doc_id, document.key, Status.INDEXED, pages=entry.pages,
                          chunks=entry.indexed_chunks, failed_pages=list(entry.failed_pages or []), pages_read=0)


def index_batch(ctx: Context, documents: list[PlannedDocument], run_id: str) -> list[DocumentResult]:
    """Index several documents: one embedder load and one opening of the vector store.

    Embedding happens before the store is opened. A document's new points and the removal
    of its old ones are one write (``together``): a search sees one version or the other. One
    document's failure is recorded as its own.
    """
    from kb.store import open_writer

    failpoints.hold(failpoints.INDEX_HOLD)  # a test's fault: S3 is stopped while this task is held
    s = ctx.settings
    embedder = make_embedder(s)
    results: list[DocumentResult] = []
    # Each with the ledger entry read here: no other task writes it while this one runs.
    prepared: list[tuple[LedgerEntry | None, Prepared]] = []
    for document in documents:
        entry = ctx.ledger.get(document.doc_id)
        if entry and entry.status == Status.QUARANTINED and entry.run_id == run_id:
            # An extract task of this run quarantined it (the OCR service refused it).
            error = entry.error or {}
            results.append(DocumentResult(document.doc_id, document.key, Status.QUARANTINED, code=error.get("code"),
                                          message=error.get("message"), record=error.get("record")))
            continue
        try:
            started = time.perf_counter()
            loaded = load_pages(ctx, document, run_id)
            if _current(ctx, document, entry, loaded, embedder.model_id):
                results.append(_kept(ctx, document, entry, loaded))
                continue
            prepared.append((entry, prepare(ctx, document, embedder, loaded, started)))
        except ValidationFailed as exc:
            results.append(quarantine_invalid(ctx, document, exc, run_id))
        except Exception as exc:  # recorded per document; the run's report fails the run
            if not isinstance(exc, IncompleteExtraction):
                log.exception("preparing %s failed", document.key)
            results.append(fail(ctx, document.obj, entry, exc, run_id, document.sha256))
    if not prepared:
        return results
    with open_writer(s) as vs:
        dimension = vs.dimension() or embedder.dimension
        for entry, p in prepared:
            started = time.perf_counter()
            document, obj = p.document, p.document.obj
            try:
                check_chunks(document_context(ctx, document), p, dimension, embedder.max_tokens)
            except ValidationFailed as exc:
                results.append(quarantine_invalid(ctx, document, exc, run_id))
                continue
            try:
                vs.ensure_collection(embedder.dimension)
                with vs.together():
                    vs.upsert(p.ids, p.vectors, p.sparse, p.payloads)
                    # After the new version's points: the old one's go, and chunks an earlier
                    # chunking of the same content made beyond these, none left behind.
                    vs.delete_all_but(document.doc_id, p.ids)
            except Exception as exc:
                log.exception("writing %s to the vector store failed", obj.key)
                withdraw_partial_write(vs, document, entry)
                results.append(fail(ctx, obj, entry, exc, run_id, document.sha256))
                continue
            if failpoints.claim(failpoints.INDEX_AFTER_UPSERT) is not None:
                failpoints.kill_this_process()  # a test's fault: killed between the write and its record
            failed = p.loaded.failed
            record(
                ctx, entry, obj, status=Status.INDEXED, sha256=document.sha256, run_id=run_id,
                pages=document.page_count, chunks=len(p.ids), failed_pages=failed or None,
                indexed_sha256=document.sha256, indexed_version_id=obj.version_id, indexed_chunks=len(p.ids),
                embedder=embedder.model_id, index_signature=signature_of(embedder.model_id, s.sparse_tokenizer),
                extraction_versions=p.loaded.extraction_versions, ocr_models=p.loaded.ocr_models, collection=s.collection, attempts=0, next_attempt_at=None, error=None,
            )
            results.append(DocumentResult(
                document.doc_id, obj.key, Status.INDEXED, pages=document.page_count, chunks=len(p.ids),
                failed_pages=failed, ranges_split=p.loaded.ranges_split, ocr_pages=p.loaded.ocr_pages,
                pages_read=p.loaded.pages_read,
                extract_seconds=p.loaded.extract_seconds, ocr_usage=p.loaded.usage.as_dict(),
                record=record_failed_pages(ctx, document, failed, run_id) if failed else None,
                pages_without_text=p.pages_without_text, seconds=round(p.seconds + time.perf_counter() - started, 3),
                pages_by_backend=p.loaded.by_backend, searchable_seconds=_since_landing(ctx, obj),
            ))
            log.info("indexed %s: %d pages (%d failed), %d chunks", obj.key, document.page_count, len(failed),
                     len(p.ids))
    return results


def _since_landing(ctx: Context, obj: ObjectInfo) -> float | None:
    """Seconds from the version's landing in the inbox to now (the landing-to-searchable
    promise, ``KB_SEARCHABLE_WITHIN_S``); None when S3 no longer has the version."""
    try:
        landed = ctx.store.landed_at(obj.bucket, obj.key, obj.version_id)
    except StorageUnavailable as exc:  # the document is indexed; only the measure is lost
        log.warning("landing time of %s unknown: %s", obj.key, exc)
        return None
    return None if landed is None else round((datetime.now(timezone.utc) - landed).total_seconds(), 3)


def withdraw_partial_write(vs, document: PlannedDocument, entry: LedgerEntry | None) -> None:
    """After a failed write, take out what of the new version got in, so searches see the
    old version alone, complete, until the retry. (A rerun of the version that is already
    indexed wrote the same ids with the same contents: nothing to take out.)"""
    if entry is not None and entry.indexed_sha256 == document.sha256:
        return
    try:
        vs.delete_version(document.doc_id, document.sha256)
    except Exception:  # the store refuses every write: the retry's upsert and delete will tidy up
        log.exception("withdrawing the partial write of %s failed", document.key)


def retire(ctx: Context, doc_ids: list[str], run_id: str) -> int:
    """Documents gone from the bucket lose their points; the ledger keeps the record."""
    if not doc_ids:
        return 0
    from kb.store import open_writer

    with open_writer(ctx.settings) as vs:
        for doc_id in doc_ids:
            vs.delete_document(doc_id)
    def deleted(entry: LedgerEntry | None) -> LedgerEntry | None:
        if entry is None:
            return None
        entry.status, entry.run_id = Status.DELETED, run_id
        entry.indexed_sha256 = entry.indexed_version_id = entry.indexed_chunks = None
        return entry

    for doc_id in doc_ids:
        ctx.ledger.update(doc_id, deleted)
    return len(doc_ids)
