"""Stage 3, extract: one mapped task per page range, on the GPU pool.

A range is read by an extractor: the OCR service over HTTP (``ServiceExtractor``), or the
engine in this process (``engine_extractor``). When the reader refuses the range for one
of its limits (pages, bytes, time) or returns pages that are truncated, repeated or
failed, the range is split in halves and each half read again, down to single pages:
a document is never refused for a limit of ours.

- A split is written down (a marker beside the range's results) before the halves go,
  so a range that could not pass is never sent whole again, by a retry of this task or
  by a later run.
- Halves that pass are stored as they finish, so a task that dies resumes from them.
- A single page that still fails is kept as a failed page with its reason; the pages
  gate decides whether the document can do without it.
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache
from typing import Callable

import pymupdf

from kb.artifacts import ArtifactKeys
from kb.errors import (CorruptArtifact, ExtractionFailed, KbError, ObjectChanged, RangeRefused, RangeTimedOut,
                       RangeTooLarge)
from kb.ledger import now_iso
from kb.limits import RangeLimits
from kb.ocr_client import OcrClient, OcrRejected
from kb.pipeline.context import Context
from kb.pipeline.messages import PageRange, RangeResult, failed_pages
from kb.pipeline.records import quarantine
from kb.planning import SCANNED, RangeCaps, classify_pages
from kb.settings import PipelineSettings
from ocr_engine.api.names import AUTO, TEXT_LAYER_READERS, BackendName, Requested
from ocr_engine.api.pages import PageAudit, PageResult, PageStatus
from ocr_engine.api.pdf import slice_pdf

log = logging.getLogger(__name__)

# (pdf bytes, first page, last page[, backend=...]) -> one result per page. ``backend`` is the
# range's route (``PageRange.backend``: ``auto``, or an OCR backend a reviewer forced) and the
# CER audit's PP-OCR.
PageExtractor = Callable[..., list[PageResult]]
# the backend that reads a text-layer page again for the CER audit
AUDIT_BACKEND = BackendName.PPOCR
# a page in one of these makes its range split (or, alone, a failed page)
BAD_STATUSES = (PageStatus.TRUNCATED, PageStatus.REPEATED, PageStatus.FAILED)


@lru_cache(maxsize=1)
def local_engine():
    from ocr_engine.engine import OcrEngine

    return OcrEngine()  # one per process: OCR models load once, on the first scanned page


def engine_extractor(data: bytes, first: int, last: int, backend: Requested = AUTO) -> list[PageResult]:
    """The engine's ``auto`` route in process: text layer where usable, else OCR."""
    return local_engine().parse_pdf(data, first, last, backend=backend)


class ServiceExtractor:
    """Page ranges through the OCR service; each request carries only its own pages, so a
    half of a range is half the bytes. Two kinds of range are split before they are ever
    sent: one over the byte limit, and one whose pages would take longer than the planner
    allows a range (``RangeCaps``) at the pace the service publishes now. A range was cut at
    the pace of its plan, which for a service that had not yet timed a page is its prior;
    once the first ranges have been timed, the rest of the run no longer sends ranges the
    service would time out (the corpus subset under small limits: 8 timeouts of a run, then 1)."""

    def __init__(self, client: OcrClient, settings: PipelineSettings) -> None:
        self.client = client
        self.settings = settings

    @cached_property
    def limits(self) -> RangeLimits:
        return self.client.limits()  # once per extract task: the pace as it is when the task starts

    def __call__(self, data: bytes, first: int, last: int, backend: Requested = AUTO) -> list[PageResult]:
        part = slice_pdf(data, first, last)
        if self.limits.max_bytes is not None and len(part) > self.limits.max_bytes:
            raise RangeTooLarge(f"pages {first}-{last} are {len(part)} bytes; the OCR service takes at most "
                                f"{self.limits.max_bytes} bytes a request")
        if last > first:
            self._check_time(part, first, last, backend)
        try:
            pages = self.client.parse(part, 1, last - first + 1, backend, read_timeout_s=self.limits.answer_within_s)
        except RangeTimedOut:
            # The service timed the pages it read before it stopped: the halves are checked
            # against that pace, not the one this task started with.
            del self.limits
            raise
        for page in pages:
            page.page += first - 1  # the slice's page 1 is the document's page `first`
        return pages

    def _check_time(self, part: bytes, first: int, last: int, backend: Requested) -> None:
        caps = RangeCaps.of(self.settings, self.limits)
        if caps.seconds is None:
            return
        with pymupdf.open(stream=part, filetype="pdf") as doc:
            # a reviewer's forced OCR backend reads every page as a scan
            kinds = classify_pages(doc, self.limits.min_text_chars) if backend == AUTO else [SCANNED] * doc.page_count
        seconds = sum(caps.page_seconds(kind) for kind in kinds)
        if seconds > caps.seconds:
            raise RangeTooLarge(f"pages {first}-{last} would take {seconds:.1f} s at the OCR service's pace now; "
                                f"a range may take {caps.seconds:.1f} s of its {self.limits.timeout_s:.0f} s timeout")


@dataclass
class _Reading:
    pages: list[PageResult] = field(default_factory=list)
    splits: int = 0


def extract(ctx: Context, rng: PageRange, extractor: PageExtractor = engine_extractor, run_id: str = "") -> str | None:
    """The range's result key; None when the reader refused the document itself (quarantined)."""
    bucket = ctx.artifacts
    done = _stored(ctx, rng.result_key)
    if done is not None and not (rng.retry_failed and done.failed_pages) and not _outdated(done, rng):
        return rng.result_key  # the same content and range was extracted before
    started = time.perf_counter()
    data = ctx.store.get_bytes(rng.bucket, rng.key, rng.version_id)
    if hashlib.sha256(data).hexdigest() != rng.sha256:
        raise ObjectChanged(f"{rng.key} changed since it was planned; the next run picks up the new version")
    reading = _Reading()
    try:
        _read(ctx, rng, data, extractor, rng.first, rng.last, reading)
    except OcrRejected as exc:
        quarantine(ctx, rng.obj, exc, run_id, sha256=rng.sha256)
        return None
    pages = sorted(reading.pages, key=lambda p: p.page)
    if ctx.quality.cer_audit:
        _audit_one_page(data, pages, extractor)
    failed = failed_pages(pages)
    if failed:
        log.warning("%s pages %d-%d: %d page(s) failed alone: %s", rng.key, rng.first, rng.last, len(failed), failed[:3])
    ctx.store.put_json(bucket, rng.result_key, RangeResult(
        rng.doc_id, rng.sha256, rng.first, rng.last, pages, seconds=round(time.perf_counter() - started, 3),
        splits=reading.splits, failed_pages=failed, run_id=run_id or None).as_dict())
    return rng.result_key


def _read(ctx: Context, rng: PageRange, data: bytes, extractor: PageExtractor, first: int, last: int,
          reading: _Reading) -> None:
    """Pages ``first``..``last`` into ``reading``: whole if the reader takes them, else in halves."""
    store, bucket = ctx.store, ctx.artifacts
    whole = (first, last) == (rng.first, rng.last)
    part_key = ArtifactKeys.range_part(rng.doc_id, rng.sha256, first, last, rng.backend)
    if not whole:
        done = _stored(ctx, part_key)
        if done is not None and not _outdated(done, rng):  # a part an earlier try of this range stored
            reading.pages.extend(done.pages)
            return
    marker = ArtifactKeys.split_marker(rng.doc_id, rng.sha256, first, last, rng.backend)
    if first == last or not store.exists(bucket, marker):
        pages, problem = _try(extractor, data, first, last, rng.backend)
        if problem is None:
            if not whole:
                store.put_json(bucket, part_key, RangeResult(rng.doc_id, rng.sha256, first, last, pages).as_dict())
            reading.pages.extend(pages)
            return
        if not ctx.settings.split_ranges:
            raise problem
        if first == last:
            reading.pages.append(_failed_page(first, problem, pages))
            return
        store.put_json(bucket, marker, {"first": first, "last": last, "code": problem.code,
                                        "reason": problem.message, "at": now_iso()})
        log.warning("%s pages %d-%d: %s; splitting the range", rng.key, first, last, problem.message)
    reading.splits += 1
    middle = (first + last) // 2
    _read(ctx, rng, data, extractor, first, middle, reading)
    _read(ctx, rng, data, extractor, middle + 1, last, reading)


def _stored(ctx: Context, key: str) -> RangeResult | None:
    """A result an earlier try stored, verified against its checksum; one that fails the
    check (torn or altered) is not used: the pages are read again and it is overwritten."""
    try:
        stored = ctx.store.get_json(ctx.artifacts, key)
    except CorruptArtifact as exc:
        log.warning("%s; reading these pages again", exc)
        return None
    return None if stored is None else RangeResult.from_dict(stored)


def _outdated(done: RangeResult, rng: PageRange) -> bool:
    """In a ``reread`` run: a stored page that another extraction version read (or that says
    none), or an OCR page another OCR model read, is read again; its split markers stay,
    since the reader's limits did not change."""
    version, model = rng.reuse_only_version, rng.reuse_only_ocr_model
    return any((version is not None and p.extraction_version != version)
               or (model is not None and p.ocr_model is not None and p.ocr_model != model)
               for p in done.pages)


def _try(extractor: PageExtractor, data: bytes, first: int, last: int,
         backend: Requested = AUTO) -> tuple[list[PageResult] | None, KbError | None]:
    """The pages, and why they cannot be used as they are (None when they can)."""
    try:
        pages = extractor(data, first, last) if backend == AUTO else extractor(data, first, last, backend=backend)
    except RangeRefused as exc:
        return None, exc
    got = sorted(p.page for p in pages)
    if got != list(range(first, last + 1)):  # a reader's bug, not a limit: the task's retries handle it
        raise ExtractionFailed(f"asked for pages {first}-{last}, the reader returned pages {got[:10]}")
    bad = [p for p in pages if p.status in BAD_STATUSES]
    if bad:
        return pages, ExtractionFailed(f"{len(bad)} page(s) of {first}-{last} came back {bad[0].status} "
                                       f"(page {bad[0].page}: {bad[0].reason})")
    return pages, None


def _failed_page(page: int, problem: KbError, pages: list[PageResult] | None) -> PageResult:
    """A page that failed alone: no text (it is indexed without), and the reason why."""
    if pages:  # the reader answered, with a bad page
        own = pages[0]
        return replace(own, markdown="", blocks=[], chars=0, status=PageStatus.FAILED,
                       reason=f"{own.status}: {own.reason or 'no reason given'}")
    return PageResult(page=page, markdown="", status=PageStatus.FAILED, reason=f"{problem.code}: {problem.message}")


def _audit_one_page(data: bytes, pages: list[PageResult], extractor: PageExtractor) -> None:
    """OCR the range's first text-layer page too and keep the CER against its text layer.

    The audit is evidence for the page gate, not part of the result: if OCR fails
    here the page keeps its text layer and simply has no audit.
    """
    from kb.quality.measures import audit_cer

    page = next((p for p in pages if p.backend in TEXT_LAYER_READERS and p.status == PageStatus.OK), None)
    if page is None:
        return
    try:
        [ocr] = extractor(data, page.page, page.page, backend=AUDIT_BACKEND)
    except Exception as exc:  # noqa: BLE001 - an audit must never fail the range
        log.warning("CER audit of page %s skipped: %s", page.page, exc)
        return
    if ocr.status in (PageStatus.OK, PageStatus.EMPTY):
        page.audit = PageAudit(ocr.backend or AUDIT_BACKEND, audit_cer(page.markdown, ocr.markdown))
