"""The engine's output: one ``PageResult`` per page, whatever the backend. The engine writes
it (``as_dict``: the OCR service's JSON, the pipeline's stored page results) and its callers
read it back typed (``PageResult.from_dict``), so no one reads a page's fields by key.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from typing import Any

from ocr_engine.api.names import TEXT_LAYER_READERS


# The engine's reading rules: how OCR lines become blocks (``ocr_engine.layout``), how a text
# layer's blocks and tables are read, how words are spaced. Raised with every change to them
# that alters a page's blocks or text, so that a stored page result says which rules read it
# and a backfill can read again the pages older rules read (kb_ingest's ``reread``): the
# pipeline keeps page results and reuses them for the same bytes, so without it a better
# layout would reach only documents read after it. Results stored before it existed have none.
EXTRACTION_VERSION = "2"


def ocr_model_id(backend: str, model_version: str | None, weights_digest: str | None) -> str:
    """The OCR model that reads scanned pages, as a page result (``PageResult.ocr_model``) and
    the engine's limits (``EngineLimits.ocr_model``) both name it: the backend, its model
    version and, for a backend with weights of its own, their digest. A ``reread`` run reads
    again the pages another model read, as it does those older reading rules read."""
    return f"{backend}:{model_version or ''}" + (f"@{weights_digest[:16]}" if weights_digest else "")


class PageStatus(StrEnum):
    OK = "ok"
    EMPTY = "empty"  # nothing recognised
    # the output stopped before the page ended: max tokens, no end token, or fewer page
    # separators than pages
    TRUNCATED = "truncated"
    REPEATED = "repeated"  # a repetition loop: distinct-n below the threshold
    FAILED = "failed"  # with ``reason``


@dataclass
class Block:
    type: str  # heading | text | table | image | formula | ... (backend vocabulary)
    # x0, y0, x1, y1 in PDF points of the page as it is displayed (rotation applied), y down
    bbox: tuple[float, float, float, float]
    text: str  # a table's is a Markdown pipe table
    confidence: float | None = None
    level: int | None = None  # a heading's: 1 the document's title, 2 a section, 3 below
    # A table (``ocr_engine.api.tables``): its cells by row, the first row its header, and where
    # known its column and row boundaries in points (len(columns) + 1, len(rows) + 1 values).
    rows: list[list[str]] | None = None
    col_x: list[float] | None = None
    row_y: list[float] | None = None
    # An OCR'd text block: each of its lines' box and where that line's text ends in ``text``
    # ([x0, y0, x1, y1, end]), so a chunk holding part of the block is located by its lines.
    lines: list[list[float]] | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Block":
        return cls(**{**_known(cls, data), "bbox": tuple(data["bbox"])})


@dataclass(frozen=True)
class PageAudit:
    """A second reading of a text-layer page by an OCR backend, and the character error rate
    of that reading against the text layer (a caller's audit; the engine sets none)."""

    backend: str
    cer: float


@dataclass
class PageResult:
    """One page's result; ``page`` is 1-based."""

    page: int
    markdown: str
    blocks: list[Block] = field(default_factory=list)
    backend: str = ""
    status: PageStatus = PageStatus.OK
    reason: str | None = None
    chars: int = 0
    confidence: float | None = None  # mean over blocks, where the backend gives one
    model_version: str | None = None
    weights_digest: str | None = None
    extraction_version: str | None = None  # EXTRACTION_VERSION of the engine that read it
    tokens_in: int | None = None
    tokens_out: int | None = None
    seconds: float = 0.0  # what a caller waited for this page (rendering and queueing included)
    # Cost accounting (the unlimited backend): the page's share of the decoder's device time
    # (its generate call's time over the rows decoded with it, over the call's pages), and
    # the KV cache of the sequence it was decoded in, per sequence (peak and mean over steps).
    device_seconds: float | None = None
    kv_peak_bytes: int | None = None
    kv_mean_bytes: int | None = None
    batch_size: int | None = None  # sequences decoded together with this page's
    # The page's size in PDF points as it is displayed (rotation applied): the frame of
    # every block's bbox. The document reader places running headers by it.
    width: float | None = None
    height: float | None = None
    audit: PageAudit | None = None

    @classmethod
    def failed(cls, page: int, backend: str, exc: Exception) -> "PageResult":
        """A page whose backend raised: it fails alone, the rest of the document goes on."""
        return cls(page=page, markdown="", backend=backend, status=PageStatus.FAILED,
                   reason=f"{type(exc).__name__}: {exc}")

    @property
    def is_failed(self) -> bool:
        return self.status == PageStatus.FAILED

    @property
    def read_by_ocr(self) -> bool:
        """An OCR backend read and returned it: not from its text layer, not failed."""
        return bool(self.backend) and self.backend not in TEXT_LAYER_READERS and not self.is_failed

    @property
    def ocr_model(self) -> str | None:
        """The OCR model that read this page (``ocr_model_id``); None for a page read from its
        text layer, or one that failed (no reading to keep)."""
        return ocr_model_id(self.backend, self.model_version, self.weights_digest) if self.read_by_ocr else None

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        # fields most blocks lack (a table's grid, a heading's level) only where they are set
        out["blocks"] = [{k: v for k, v in b.items() if v is not None or k not in _SPARSE_BLOCK_FIELDS} for b in out["blocks"]]
        if self.audit is None:
            del out["audit"]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "PageResult":
        """What ``as_dict`` wrote, read back exactly; results written before a field existed
        read with its default, and keys this version does not know are left out."""
        audit = data.get("audit")
        return cls(**{**_known(cls, data), "status": PageStatus(data.get("status") or PageStatus.OK),
                      "blocks": [Block.from_dict(b) for b in data.get("blocks") or []],
                      "audit": PageAudit(**audit) if audit else None})


def _known(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


_SPARSE_BLOCK_FIELDS = ("rows", "col_x", "row_y", "level", "lines")


def block_markdown(block: Block) -> str:
    if block.type == "heading":
        return f"{'#' * (block.level or 2)} {block.text}"
    return block.text


def count_chars(text: str) -> int:
    return sum(1 for c in text if not c.isspace())
