"""The ingestion steps, as plain functions the DAG's tasks call one-to-one.

Each step reads and writes durable state (object store, ledger, Qdrant) and returns
small JSON-able references, never document text, so Airflow's XCom stays tiny and any
step can be rerun: results are keyed by content hash, points by deterministic ids.
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable

from kb import ledger as L
from kb.chunking import chunk_pages
from kb.embedding import Embedder
from kb.errors import DocumentError, ExtractionFailed, IncompleteExtraction, ObjectChanged, ValidationFailed
from kb.objectstore import ObjectInfo, ObjectStore
from kb.ocr_client import OcrRejected
from kb.planning import SCANNED, classify_pages, split_ranges
from kb.settings import PipelineSettings, QualitySettings
from kb.sparse import SparseEncoder, SparseVector
from ocr_engine.documents import open_pdf
from ocr_engine.errors import DocumentTooLarge, InputError

log = logging.getLogger(__name__)

BAD_INPUT = (InputError, DocumentError)

# (pdf bytes, first page, last page[, backend=...]) -> one dict per page with at least
# page, markdown, status. ``backend`` is passed only for the CER audit ("ppocr").
PageExtractor = Callable[..., list[dict[str, Any]]]


@lru_cache(maxsize=1)
def _engine():
    from ocr_engine.engine import OcrEngine

    return OcrEngine()  # one per process: OCR models load once, on the first scanned page


def engine_extractor(data: bytes, first: int, last: int, backend: str = "auto") -> list[dict[str, Any]]:
    """The engine's ``auto`` route in process: text layer where usable, else OCR.

    The OCR service replaces this call with an HTTP one; the results are the same schema.
    """
    return [r.as_dict() for r in _engine().parse_pdf(data, first, last, backend=backend)]


@dataclass
class Steps:
    """The pipeline bound to its stores; the DAG builds one per task."""

    store: ObjectStore
    settings: PipelineSettings
    quality: QualitySettings = field(default_factory=QualitySettings)

    @property
    def ledger(self) -> L.Ledger:
        return L.Ledger(self.store, self.settings.artifacts_bucket)

    # --- 1. sense --------------------------------------------------------------------

    def sense(self, prefix: str = "", force: bool = False) -> dict[str, Any]:
        """``force`` re-plans every object under ``prefix`` (a manual backfill); content
        already extracted is reused and point ids are stable, so it only costs time."""
        s = self.settings
        objects = list(self.store.list_latest(s.inbox_bucket, prefix))
        entries = self.ledger.all()
        if prefix:
            entries = {k: e for k, e in entries.items() if e.key.startswith(prefix)}
        signature = index_signature(s)
        work = L.pending_work(s.inbox_bucket, objects, entries, s.max_attempts, signature)
        if force:
            work.changed, work.unchanged = work.changed + work.unchanged, []
        log.info(
            "sensed %s: %d new, %d changed, %d retry, %d unchanged, %d deleted",
            s.inbox_bucket, len(work.new), len(work.changed), len(work.retry), len(work.unchanged), len(work.deleted),
        )
        return {
            "todo": [o.as_dict() for o in work.todo],
            "unchanged": len(work.unchanged),
            "deleted": [e.doc_id for e in work.deleted],
            "force": force,
            # computed once here (hashing the embedder's weights costs ~0.6 s) and carried on
            "index_signature": signature,
        }

    # --- 2. plan ---------------------------------------------------------------------

    def plan(self, todo: list[dict[str, Any]], run_id: str, force: bool = False,
             signature: str | None = None) -> dict[str, Any]:
        """``force`` re-indexes content that is indexed already (extraction is still reused)."""
        signature = signature or index_signature(self.settings)
        documents, ranges, quarantined, skipped = [], [], [], []
        for item in todo:
            obj = ObjectInfo(**item)
            doc_id = L.doc_id_for(obj.bucket, obj.key)
            entry = self.ledger.get(doc_id)
            sha = None
            try:
                if obj.size > self.settings.max_file_mb * 1024 * 1024:
                    raise DocumentTooLarge(f"{obj.size} bytes is over the {self.settings.max_file_mb} MB limit")
                data = self.store.get_bytes(obj.bucket, obj.key, obj.version_id)
                sha = hashlib.sha256(data).hexdigest()
                if (not force and entry and entry.status == L.INDEXED and entry.indexed_sha256 == sha
                        and entry.index_signature == signature):
                    # Same bytes under a new ETag/version (a re-upload): nothing to redo.
                    self._record(entry, obj, status=L.INDEXED, sha256=sha, run_id=run_id)
                    skipped.append({"doc_id": doc_id, "key": obj.key, "reason": "same_content"})
                    continue
                doc = open_pdf(data, max_pages=self.settings.max_pages)
                try:
                    kinds = classify_pages(doc, self.settings.min_text_chars)
                finally:
                    doc.close()
            except BAD_INPUT as exc:
                quarantined.append(self.quarantine(obj, exc, run_id, sha256=sha))
                continue
            cap = ocr_range_cap(self.settings) if SCANNED in kinds else self.settings.max_textlayer_pages_per_range
            spans = split_ranges(len(kinds), cap)
            document = {
                "doc_id": doc_id,
                **obj.as_dict(),
                "sha256": sha,
                "page_count": len(kinds),
                "scanned_pages": [i + 1 for i, k in enumerate(kinds) if k == SCANNED],
                "ranges": [self.range_key(doc_id, sha, a, b) for a, b in spans],
            }
            documents.append(document)
            for (first, last), key in zip(spans, document["ranges"]):
                ranges.append({
                    "doc_id": doc_id, "bucket": obj.bucket, "key": obj.key, "version_id": obj.version_id,
                    "etag": obj.etag, "size": obj.size, "sha256": sha, "first": first, "last": last, "result_key": key,
                })
        log.info("planned %d documents, %d ranges, %d quarantined, %d skipped",
                 len(documents), len(ranges), len(quarantined), len(skipped))
        return {
            "documents": documents, "ranges": ranges, "quarantined": quarantined, "skipped": skipped,
            "batches": batch_documents(documents, self.settings.index_batch_pages, self.settings.index_batch_documents),
        }

    @staticmethod
    def range_key(doc_id: str, sha256: str, first: int, last: int, backend: str = "auto") -> str:
        return f"pages/{doc_id}/{sha256}/{backend}/{first:05d}-{last:05d}.json"

    # --- 3. extract (one mapped task per range; the OCR service plugs in here) ----------

    def extract(self, rng: dict[str, Any], extractor: PageExtractor = engine_extractor,
                run_id: str | None = None) -> str | None:
        """The range's result key; None when the OCR service rejected the document (quarantined)."""
        bucket = self.settings.artifacts_bucket
        if self.store.exists(bucket, rng["result_key"]):
            return rng["result_key"]  # the same content and range was extracted before
        started = time.perf_counter()
        data = self.store.get_bytes(rng["bucket"], rng["key"], rng["version_id"])
        if hashlib.sha256(data).hexdigest() != rng["sha256"]:
            raise ObjectChanged(f"{rng['key']} changed since it was planned; the next run picks up the new version")
        try:
            pages = extractor(data, rng["first"], rng["last"])
        except OcrRejected as exc:
            self.quarantine(_object_of(rng), exc, run_id or "", sha256=rng["sha256"])
            return None
        failed = [p for p in pages if p.get("status") == "failed"]
        if failed:
            # Not stored: the task's retries, then later runs, try the range again, and a
            # page never silently turns into an empty one.
            raise ExtractionFailed(f"{len(failed)} page(s) of {rng['key']} failed: {failed[0].get('reason')}")
        if self.quality.cer_audit:
            self._audit_one_page(data, pages, extractor)
        self.store.put_json(bucket, rng["result_key"], {
            "doc_id": rng["doc_id"], "sha256": rng["sha256"], "first": rng["first"], "last": rng["last"],
            "seconds": round(time.perf_counter() - started, 3), "pages": pages,
        })
        return rng["result_key"]

    @staticmethod
    def _audit_one_page(data: bytes, pages: list[dict[str, Any]], extractor: PageExtractor) -> None:
        """OCR the range's first text-layer page too and keep the CER against its text layer.

        The audit is evidence for the page gate, not part of the result: if OCR fails
        here the page keeps its text layer and simply has no audit.
        """
        from kb.quality.measures import audit_cer

        page = next((p for p in pages if p.get("backend") == "textlayer" and p.get("status") == "ok"), None)
        if page is None:
            return
        try:
            [ocr] = extractor(data, page["page"], page["page"], backend="ppocr")
        except Exception as exc:  # noqa: BLE001 - an audit must never fail the range
            log.warning("CER audit of page %s skipped: %s", page["page"], exc)
            return
        if ocr.get("status") in ("ok", "empty"):
            page["audit"] = {"backend": ocr.get("backend", "ppocr"), "cer": audit_cer(page["markdown"], ocr["markdown"])}

    # --- 4. validate, chunk, embed, upsert (one mapped task per document) --------------

    def load_pages(self, document: dict[str, Any]) -> list[dict[str, Any]]:
        pages: list[dict[str, Any]] = []
        missing = []
        for key in document["ranges"]:
            result = self.store.get_json(self.settings.artifacts_bucket, key)
            if result is None:
                missing.append(key)
            else:
                pages.extend(result["pages"])
        if missing:
            raise IncompleteExtraction(f"{len(missing)} page range(s) have no result: {missing[:3]}")
        return pages

    def _gate(self, document: dict[str, Any], suite: str, frame, expectations: list) -> dict[str, Any]:
        """Validate ``frame``; raises ValidationFailed with the gate's report when it fails."""
        from kb.quality.gate import validate

        docs_dir = self.quality.data_docs_dir or self.settings.state_dir / "data_docs"
        report = validate(frame, suite, expectations, f"{_safe(document['key'])}@{document['sha256'][:12]}", docs_dir)
        gate = report.as_dict()
        for failure, f in zip(gate["failures"], report.failures):
            failure["line"] = f.line()
        if not report.success:
            raise ValidationFailed(f"{len(report.failures)} {suite} expectation(s) failed: "
                                   f"{'; '.join(f.line() for f in report.failures)}", {"gates": [gate]})
        return gate

    def check_pages(self, document: dict[str, Any], pages: list[dict[str, Any]]) -> dict[str, Any]:
        """The pages gate, before chunking."""
        from kb.quality.measures import page_frame
        from kb.quality.suites import pages_suite

        frame = page_frame(pages, self.quality.distinct_n)
        return self._gate(document, "pages", frame, pages_suite(self.quality, document["page_count"], frame))

    def check_chunks(self, p: "_Prepared", dimension: int, max_tokens: int) -> dict[str, Any]:
        """The chunks gate, against the dimension of the collection the chunks go into."""
        from kb.quality.measures import chunk_frame
        from kb.quality.suites import chunks_suite

        frame = chunk_frame(p.ids, p.payloads, p.vectors)
        return self._gate(p.document, "chunks", frame, chunks_suite(self.quality, dimension, max_tokens))

    def prepare(self, document: dict[str, Any], embedder: Embedder) -> _Prepared:
        """Pages checked, chunked and embedded: everything but the writes."""
        from kb.vectorstore import point_id  # qdrant_client costs ~0.6 s to import; extract tasks skip it

        started = time.perf_counter()
        pages = self.load_pages(document)
        self.check_pages(document, pages)
        pages.sort(key=lambda p: p["page"])
        chunks = chunk_pages(
            [(p["page"], p["markdown"]) for p in pages],
            embedder.count_tokens,
            max_tokens=min(self.settings.chunk_max_tokens, embedder.max_tokens - 8),
            overlap_sentences=self.settings.chunk_overlap_sentences,
        )
        texts = [c.embedding_text() for c in chunks]
        vectors = embedder.embed(texts)
        encoder = SparseEncoder(self.settings.sparse_tokenizer)
        sparse = [encoder.encode_document(t) for t in texts]
        obj = _object_of(document)
        payloads = [{
            "doc_id": document["doc_id"], "bucket": obj.bucket, "key": obj.key, "version_id": obj.version_id,
            "etag": obj.etag, "sha256": document["sha256"], "pages": c.pages, "chunk_index": c.index,
            "section": c.section, "text": c.text, "tokens": c.tokens, "embedder": embedder.model_id,
        } for c in chunks]
        ids = [point_id(document["doc_id"], document["sha256"], c.index) for c in chunks]
        empty = len([p for p in pages if p.get("status") == "empty"])
        return _Prepared(document, ids, vectors, sparse, payloads, empty, time.perf_counter() - started)

    def index_batch(self, documents: list[dict[str, Any]], run_id: str) -> list[dict[str, Any]]:
        """Index several documents: one embedder load and one opening of the vector store.

        Embedding happens before the store is opened, so the local store's lock is held
        only for the writes. One document's failure is recorded as its own.
        """
        from kb.vectorstore import VectorStore

        embedder = Embedder(self.settings.embed_model_dir, batch_size=self.settings.embed_batch_size)
        results: list[dict[str, Any]] = []
        # Each with the ledger entry read above: no other task writes it while this one runs.
        prepared: list[tuple[L.LedgerEntry | None, _Prepared]] = []
        for document in documents:
            entry = self.ledger.get(document["doc_id"])
            if entry and entry.status == L.QUARANTINED and entry.run_id == run_id:
                # An extract task of this run quarantined it (the OCR service refused it).
                error = entry.error or {}
                results.append({"doc_id": document["doc_id"], "key": document["key"], "status": L.QUARANTINED,
                                "code": error.get("code"), "message": error.get("message"), "record": error.get("record")})
                continue
            try:
                prepared.append((entry, self.prepare(document, embedder)))
            except ValidationFailed as exc:
                results.append(self.quarantine_invalid(document, exc, run_id))
            except Exception as exc:  # recorded per document; the run's report fails the run
                if not isinstance(exc, IncompleteExtraction):
                    log.exception("preparing %s failed", document["key"])
                results.append(self._fail(_object_of(document), entry, exc, run_id, document["sha256"]))
        if not prepared:
            return results
        with VectorStore.open(self.settings) as vs:
            dimension = vs.dimension() or embedder.dimension
            for entry, p in prepared:
                started = time.perf_counter()
                document, obj = p.document, _object_of(p.document)
                try:
                    self.check_chunks(p, dimension, embedder.max_tokens)
                except ValidationFailed as exc:
                    results.append(self.quarantine_invalid(document, exc, run_id))
                    continue
                try:
                    vs.ensure_collection(embedder.dimension)
                    vs.upsert(p.ids, p.vectors, p.sparse, p.payloads)
                    # Only after the new version is in: the old one's points go, none left behind.
                    vs.delete_other_versions(document["doc_id"], document["sha256"])
                except Exception as exc:
                    log.exception("writing %s to the vector store failed", obj.key)
                    results.append(self._fail(obj, entry, exc, run_id, document["sha256"]))
                    continue
                self._record(
                    entry, obj, status=L.INDEXED, sha256=document["sha256"], run_id=run_id,
                    pages=document["page_count"], chunks=len(p.ids), indexed_sha256=document["sha256"],
                    indexed_version_id=obj.version_id, indexed_chunks=len(p.ids), embedder=embedder.model_id,
                    index_signature=signature_of(embedder.model_id, self.settings.sparse_tokenizer),
                    collection=self.settings.collection, attempts=0, error=None,
                )
                results.append({
                    "doc_id": document["doc_id"], "key": obj.key, "status": L.INDEXED, "pages": document["page_count"],
                    "chunks": len(p.ids), "pages_without_text": p.pages_without_text,
                    "seconds": round(p.seconds + time.perf_counter() - started, 3),
                })
                log.info("indexed %s: %d pages, %d chunks", obj.key, document["page_count"], len(p.ids))
        return results

    # --- deletions -----------------------------------------------------------------

    def retire(self, doc_ids: list[str], run_id: str) -> int:
        """Documents gone from the bucket lose their points; the ledger keeps the record."""
        if not doc_ids:
            return 0
        from kb.vectorstore import VectorStore

        with VectorStore.open(self.settings) as vs:
            for doc_id in doc_ids:
                vs.delete_other_versions(doc_id, None)
        for doc_id in doc_ids:
            entry = self.ledger.get(doc_id)
            if entry:
                entry.status, entry.run_id = L.DELETED, run_id
                entry.indexed_sha256 = entry.indexed_version_id = entry.indexed_chunks = None
                self.ledger.put(entry)
        return len(doc_ids)

    # --- 5. report -----------------------------------------------------------------

    def report(self, run_id: str, sensed: dict[str, Any], planned: dict[str, Any],
               indexed: list[dict[str, Any]], seconds: float | None = None) -> dict[str, Any]:
        ok = [r for r in indexed if r and r.get("status") == L.INDEXED]
        summary = {
            "run_id": run_id,
            "documents_seen": len(sensed.get("todo", [])) + sensed.get("unchanged", 0),
            "documents_unchanged": sensed.get("unchanged", 0),
            "documents_indexed": len(ok),
            "documents_skipped_same_content": len(planned.get("skipped", [])),
            "documents_quarantined": len(planned.get("quarantined", [])) + sum(
                1 for r in indexed if r and r.get("status") == L.QUARANTINED),
            "documents_failed": sum(1 for r in indexed if r and r.get("status") == L.FAILED),
            "documents_deleted": len(sensed.get("deleted", [])),
            "pages": sum(r["pages"] for r in ok),
            "chunks": sum(r["chunks"] for r in ok),
            "quarantine": planned.get("quarantined", []) + [r for r in indexed if r and r.get("status") == L.QUARANTINED],
            "seconds": seconds,
        }
        self.store.put_json(self.settings.artifacts_bucket, f"runs/{_safe(run_id)}/summary.json", summary)
        log.info("run summary: %s", {k: v for k, v in summary.items() if k != "quarantine"})
        return summary

    # --- alerts -------------------------------------------------------------------

    def pending_alerts(self, results: list[dict[str, Any]], channels: list[str]) -> list[dict[str, Any]]:
        """One alert per quarantined document version, for each channel not yet sent.

        Markers under ``alerts/`` make the sending idempotent: a retried alert task, or a
        later run that quarantines the same version again, sends nothing twice.
        """
        from kb.quality.alerts import Alert

        bucket, out, seen = self.settings.artifacts_bucket, [], set()
        for r in results:
            if not r or r.get("status") != L.QUARANTINED or not r.get("record") or r["record"] in seen:
                continue
            seen.add(r["record"])
            record = self.store.get_json(bucket, r["record"])
            if record is None:
                log.warning("quarantine record %s is missing; no alert for %s", r["record"], r.get("key"))
                continue
            marker = r["record"].replace("quarantine/", "alerts/", 1).removesuffix(".json")
            todo = [c for c in channels if not self.store.exists(bucket, f"{marker}/{c}.json")]
            if todo:
                out.append({"alert": Alert.from_record(record, bucket), "marker": marker, "channels": todo})
        return out

    def mark_alerted(self, marker: str, channel: str, run_id: str) -> None:
        self.store.put_json(self.settings.artifacts_bucket, f"{marker}/{channel}.json", {"run_id": run_id, "at": L.now_iso()})

    # --- ledger and quarantine -----------------------------------------------------

    def quarantine(self, obj: ObjectInfo, exc: Exception, run_id: str, sha256: str | None = None,
                   validation: dict[str, Any] | None = None) -> dict[str, Any]:
        doc_id = L.doc_id_for(obj.bucket, obj.key)
        where = f"{self.quarantine_prefix(obj)}.json"
        record = {
            "code": getattr(exc, "code", type(exc).__name__), "message": str(exc), "doc_id": doc_id,
            "bucket": obj.bucket, "key": obj.key, "version_id": obj.version_id, "etag": obj.etag,
            "size": obj.size, "sha256": sha256, "run_id": run_id, "at": L.now_iso(), "record": where,
        }
        if validation is not None:
            record["validation"] = validation
        self.store.put_json(self.settings.artifacts_bucket, where, record)
        self._record(self.ledger.get(doc_id), obj, status=L.QUARANTINED, sha256=sha256, run_id=run_id,
                     error={"code": record["code"], "message": record["message"], "record": where})
        log.warning("quarantined %s (%s): %s", obj.key, record["code"], record["message"])
        return {"doc_id": doc_id, "key": obj.key, "status": L.QUARANTINED, "code": record["code"],
                "message": record["message"], "record": where}

    @staticmethod
    def quarantine_prefix(obj: ObjectInfo) -> str:
        return f"quarantine/{L.doc_id_for(obj.bucket, obj.key)}/{obj.version_id or obj.etag}"

    def quarantine_invalid(self, document: dict[str, Any], exc: ValidationFailed, run_id: str) -> dict[str, Any]:
        """A version that failed a gate: its page results and GX's full validation results
        go under its quarantine prefix; Qdrant and the ledger's indexed version stay as they were."""
        obj, bucket = _object_of(document), self.settings.artifacts_bucket
        prefix = self.quarantine_prefix(obj)
        gates = []
        for gate in exc.report["gates"]:
            result_key = f"{prefix}/validation-{gate['suite']}.json"
            self.store.put_json(bucket, result_key, gate["result"])
            gates.append({**gate, "result": result_key})  # the record points at the full result
        for key in document["ranges"]:
            pages = self.store.get_json(bucket, key)
            if pages is not None:
                self.store.put_json(bucket, f"{prefix}/pages/{key.rsplit('/', 1)[-1]}", pages)
        docs_url = next((g["docs_url"] for g in gates if g.get("docs_url")), None)
        return self.quarantine(obj, exc, run_id, document["sha256"],
                               validation={"gates": gates, "docs_url": docs_url, "artifacts": f"{prefix}/pages/"})

    def _fail(self, obj: ObjectInfo, entry: L.LedgerEntry | None, exc: Exception, run_id: str,
              sha256: str | None) -> dict[str, Any]:
        """A failure that may pass: counted, and quarantined once it keeps happening."""
        attempts = (entry.attempts if entry and entry.same_version(obj) else 0) + 1
        if attempts >= self.settings.max_attempts:
            return self.quarantine(obj, exc, run_id, sha256)
        self._record(entry, obj, status=L.FAILED, sha256=sha256, run_id=run_id, attempts=attempts,
                     error={"code": getattr(exc, "code", type(exc).__name__), "message": str(exc)})
        log.warning("failed %s (attempt %d of %d): %s", obj.key, attempts, self.settings.max_attempts, exc)
        return {"doc_id": L.doc_id_for(obj.bucket, obj.key), "key": obj.key, "status": L.FAILED,
                "code": getattr(exc, "code", None), "message": str(exc), "attempts": attempts}

    def _record(self, entry: L.LedgerEntry | None, obj: ObjectInfo, **fields: Any) -> None:
        entry = entry or L.LedgerEntry(
            doc_id=L.doc_id_for(obj.bucket, obj.key), bucket=obj.bucket, key=obj.key, etag=obj.etag,
            version_id=obj.version_id, size=obj.size, status=fields["status"],
        )
        entry.etag, entry.version_id, entry.size = obj.etag, obj.version_id, obj.size
        for name, value in fields.items():
            setattr(entry, name, value)
        self.ledger.put(entry)


@dataclass
class _Prepared:
    document: dict[str, Any]
    ids: list[str]
    vectors: Any  # (chunks, dimension) float32
    sparse: list[SparseVector]
    payloads: list[dict[str, Any]]
    pages_without_text: int
    seconds: float


def _object_of(document: dict[str, Any]) -> ObjectInfo:
    return ObjectInfo(document["bucket"], document["key"], document["etag"], document["size"], document["version_id"])


def signature_of(embedder_id: str, sparse_tokenizer: str) -> str:
    """What a document's points are made with: the embedder (by its weights' digest) and the
    sparse scheme. The ledger keeps it; a different one makes an indexed document work again."""
    return f"{embedder_id}|{SparseEncoder(sparse_tokenizer).signature}"


@lru_cache(maxsize=8)
def _signature(model_dir: str | None, tokenizer: str) -> str:
    return signature_of(Embedder(model_dir).model_id, tokenizer)


def index_signature(settings: PipelineSettings) -> str:
    """The signature the current settings make (hashes the embedder's weights: ~0.6 s)."""
    return _signature(str(settings.embed_model_dir) if settings.embed_model_dir else None, settings.sparse_tokenizer)


def ocr_range_cap(settings: PipelineSettings) -> int:
    """Pages per OCR range: the engine's token budget for one generate call, and the cap."""
    from ocr_engine.unlimited.budget import TokenBudget, visual_tokens_base_mode

    budget = TokenBudget(context_length=32_768, visual_tokens_per_page=visual_tokens_base_mode(1024),
                         prompt_tokens=16, output_tokens_per_page=settings.expected_tokens_per_page)
    return max(1, min(settings.max_pages_per_range, budget.max_pages()))


def batch_documents(documents: list[dict[str, Any]], max_pages: int, max_documents: int) -> list[list[dict[str, Any]]]:
    """Group documents for indexing so each task loads the embedder once for many pages.

    Loading the embedding model costs seconds per task process; a batch amortises it,
    while several batches still index in parallel on a large pool.
    """
    batches: list[list[dict[str, Any]]] = []
    pages = 0
    for document in documents:
        if not batches or len(batches[-1]) >= max_documents or pages + document["page_count"] > max_pages:
            if not batches or batches[-1]:
                batches.append([])
            pages = 0
        batches[-1].append(document)
        pages += document["page_count"]
    return [b for b in batches if b]


def _safe(run_id: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in run_id)
