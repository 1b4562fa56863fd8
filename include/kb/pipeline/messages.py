"""What travels between the stages (through XCom, as dicts): typed records.

Each stage takes and returns these; ``as_dict``/``from_dict`` are the only places they
become JSON, so a field is added in one place.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from typing import Any

from kb.artifacts import AlertEvent
from kb.ledger import Status
from kb.objectstore import ObjectInfo
from ocr_engine.api.names import AUTO, Requested, requested
from ocr_engine.api.pages import PageResult


def _plain(items: list[tuple[str, Any]]) -> dict[str, Any]:
    # enums as their plain values, so XCom and JSON see strings
    return {k: v.value if isinstance(v, Enum) else v for k, v in items}


class _Record:
    def as_dict(self) -> dict[str, Any]:
        return asdict(self, dict_factory=_plain)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls, data: dict[str, Any]):
        names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass(frozen=True)
class DocumentVersion(_Record):
    """One version of a document in the inbox: the object as listed, and its content hash."""

    doc_id: str
    bucket: str
    key: str
    etag: str
    size: int
    version_id: str | None
    sha256: str

    @property
    def obj(self) -> ObjectInfo:
        return ObjectInfo(self.bucket, self.key, self.etag, self.size, self.version_id)


@dataclass(frozen=True)
class PageRange(DocumentVersion):
    """One extract task: pages ``first``..``last`` of one version of a document."""

    first: int
    last: int
    result_key: str
    # a backfill reads again the pages an earlier extraction left failed
    retry_failed: bool = False
    # the reader's route: ``auto`` (text layer where usable), or an OCR backend for every page
    # (a reviewer's ``reextract-ocr``); part of the result key
    backend: Requested = AUTO
    # a ``reread`` run: the reader's extraction version now, the only one whose stored pages
    # are reused; pages another version read (or none, before versions) are read again
    reuse_only_version: str | None = None
    # and the OCR model now (``PageResult.ocr_model``): OCR pages another model read are read again
    reuse_only_ocr_model: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "backend", requested(self.backend))  # XCom gives it back as a string


@dataclass
class RangeResult:
    """What extract stores for a page range, or for a part of one that a split read: its
    pages in page order, and how they were read."""

    doc_id: str
    sha256: str
    first: int
    last: int
    pages: list[PageResult]
    seconds: float = 0.0  # the extract task's time on the range
    splits: int = 0  # how many times the range was halved
    failed_pages: list[dict[str, Any]] = field(default_factory=list)  # [{"page", "reason"}]
    # the run whose extract read these pages (None: stored before results named it); a later
    # run that reuses them reads none, and its summary says so
    run_id: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {**{f.name: getattr(self, f.name) for f in fields(self)}, "pages": [p.as_dict() for p in self.pages]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RangeResult":
        names = {f.name for f in fields(cls)}
        return cls(**{**{k: v for k, v in data.items() if k in names},
                      "pages": [PageResult.from_dict(p) for p in data["pages"]]})


def failed_pages(pages: list[PageResult]) -> list[dict[str, Any]]:
    """The pages that failed alone, as records and alerts list them: [{"page", "reason"}]."""
    return [{"page": p.page, "reason": p.reason} for p in pages if p.is_failed]


@dataclass(frozen=True)
class PlannedDocument(DocumentVersion):
    page_count: int
    scanned_pages: list[int]
    ranges: list[str]  # the result key of each of its page ranges, in page order
    # a reviewer's decision on this version (``kb.decisions.Decision``) and its quality
    # overrides, which apply to this document alone
    decision: str | None = None
    quality: dict[str, Any] = field(default_factory=dict)
    # a ``reread`` run that is not also forced: when none of its pages is read again and its
    # indexed points are this version's, made the current way, index keeps them as they are
    keep_if_current: bool = False


@dataclass
class DocumentResult(_Record):
    """How one document version ended in this run."""

    doc_id: str
    key: str
    status: Status
    code: str | None = None
    message: str | None = None
    # the artifact an alert is built from: a quarantine record, or a failed-pages record
    record: str | None = None
    pages: int | None = None
    chunks: int | None = None
    # pages indexed without: [{"page", "reason"}]
    failed_pages: list[dict[str, Any]] = field(default_factory=list)
    ranges_split: int = 0
    ocr_pages: int | None = None  # pages read by OCR (the rest from their text layer)
    # pages this run read (the rest were stored results of an earlier run, reused); None
    # where the document was not indexed
    pages_read: int | None = None
    extract_seconds: float | None = None  # the extract tasks' time on its ranges, summed
    # what its OCR pages cost: ``accounting.OcrUsage.as_dict()`` (a plain dict, for XCom)
    ocr_usage: dict[str, Any] | None = None
    attempts: int | None = None
    next_attempt_at: str | None = None
    pages_without_text: int | None = None
    seconds: float | None = None
    # indexed pages by the backend that read them (text_layer, ppocr, unlimited, ...)
    pages_by_backend: dict[str, int] = field(default_factory=dict)
    # from the version's landing in the inbox (its Last-Modified) to the end of its indexing
    searchable_seconds: float | None = None

    def __post_init__(self) -> None:
        self.status = Status(self.status)

    @property
    def alert_event(self) -> AlertEvent | None:
        if not self.record:
            return None
        if self.status == Status.QUARANTINED:
            return AlertEvent.QUARANTINED
        if self.status == Status.INDEXED and self.failed_pages:
            return AlertEvent.PAGES_FAILED
        return None


@dataclass(frozen=True)
class RetireHold(_Record):
    """A run that would have retired more than ``KB_MAX_RETIRE_SHARE`` of the indexed
    documents it looked at, and retired none: the listing is suspect (empty, partial, the
    wrong bucket) until a forced run says the deletions are meant."""

    bucket: str
    prefix: str
    would_retire: int  # indexed documents whose objects were not listed
    indexed: int  # indexed documents under the prefix, before the run
    max_share: float
    allowed: int  # the most this run could have retired
    listed: int  # objects the listing returned
    keys: list[str]  # some of the documents it would have retired
    # names the set of documents held, so the same hold alerts once however many runs meet it
    fingerprint: str


@dataclass(frozen=True)
class Sensed(_Record):
    todo: list[ObjectInfo]
    unchanged: int = 0
    backing_off: int = 0
    deleted: list[str] = field(default_factory=list)  # what the run retires
    force: bool = False
    reread: bool = False  # read again the pages an older extraction version read (implies re-planning)
    # computed once in sense (hashing the embedder's weights costs ~0.6 s) and carried on
    index_signature: str | None = None
    retire_held: RetireHold | None = None  # the retire guard stopped this run's deletions

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Sensed":
        held = data.get("retire_held")
        return cls(**{**{k: v for k, v in data.items() if k in {f.name for f in fields(cls)}},
                      "todo": [ObjectInfo.from_dict(o) for o in data.get("todo", [])],
                      "retire_held": RetireHold.from_dict(held) if held else None})


@dataclass(frozen=True)
class Swept(_Record):
    """What one run's retention sweep did."""

    retention_days: float
    looked_at: int  # documents whose artifacts it listed (those that changed since it last looked)
    found: int  # folders and inbox versions it found no kept version needing, this run
    expired: int  # folders and inbox versions removed
    objects_removed: int  # object versions removed
    bytes_removed: int
    waiting: int  # still waiting for their retention to pass, or for a later run
    refused: list[str] = field(default_factory=list)  # the server's error codes, when it refused removals
    # the first of what it removed: {"bucket", "name", "version_id", "doc_id", "since", "objects", "bytes"}
    removed: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Plan(_Record):
    documents: list[PlannedDocument]
    ranges: list[PageRange]
    quarantined: list[DocumentResult]
    skipped: list[dict[str, Any]]  # {"doc_id", "key", "reason"}
    batches: list[list[PlannedDocument]]  # one index task each
    limits: dict[str, Any]  # the RangeLimits the ranges were cut from

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Plan":
        return cls(
            documents=[PlannedDocument.from_dict(d) for d in data["documents"]],
            ranges=[PageRange.from_dict(r) for r in data["ranges"]],
            quarantined=[DocumentResult.from_dict(q) for q in data["quarantined"]],
            skipped=list(data.get("skipped", [])),
            batches=[[PlannedDocument.from_dict(d) for d in b] for b in data["batches"]],
            limits=dict(data.get("limits") or {}),
        )
