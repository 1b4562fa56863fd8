"""What one chunk's point in the vector store holds: its id, its payload and the filters over
the payload. The write side owns it (``kb.pipeline.index`` builds points, ``kb.store``
stores them); the read side (``kb.retrieval``, ``kb.search``) imports it and copies nothing.

No Qdrant here: an extract task imports the pipeline without paying for qdrant_client.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kb.chunking import Chunk
    from kb.pipeline.messages import PlannedDocument

# Point ids are UUIDv5 in this namespace: the same chunk of the same content always
# gets the same id, so a rerun overwrites instead of duplicating.
POINT_NAMESPACE = uuid.UUID("6f1c2e3a-8b0d-5c4e-9a7f-1d2b3c4e5f60")

# The payload fields search filters match on (indexed as keywords and integers by the store).
PREFIXES, LANGUAGE, PAGES = "prefixes", "language", "pages"


def point_id(doc_id: str, sha256: str, chunk_index: int) -> str:
    return str(uuid.uuid5(POINT_NAMESPACE, f"{doc_id}:{sha256}:{chunk_index}"))


def key_prefixes(key: str) -> list[str]:
    """Every folder a key is in, and the key itself: what ``SearchFilter.key_prefix`` matches
    (Qdrant matches whole keyword values, so the prefixes are stored with each chunk)."""
    parts = key.split("/")
    return ["/".join(parts[:i]) + "/" for i in range(1, len(parts))] + [key]


_CJK = re.compile(r"[\u3400-\u9fff]")


def language(text: str) -> str:
    """``zh`` when CJK characters make up a fifth of the letters, else ``en``: a chunk's
    ``language`` field, and the rule a query's language is told by."""
    letters = [c for c in text if c.isalpha()]
    if not letters:
        return "en"
    return "zh" if sum(1 for c in letters if _CJK.match(c)) / len(letters) >= 0.2 else "en"


def chunk_payload(document: PlannedDocument, chunk: Chunk, embedder_id: str) -> dict[str, Any]:
    return {
        "doc_id": document.doc_id, "bucket": document.bucket, "key": document.key,
        "version_id": document.version_id, "etag": document.etag, "sha256": document.sha256,
        PAGES: chunk.pages, "chunk_index": chunk.index, "section": chunk.section, "text": chunk.text,
        "tokens": chunk.tokens, "embedder": embedder_id, PREFIXES: key_prefixes(document.key),
        LANGUAGE: language(chunk.text), "kind": chunk.kind.value, "boxes": [b.as_dict() for b in chunk.boxes],
    }


@dataclass(frozen=True)
class SearchFilter:
    """What a search may return: keys under a folder (a prefix ending in ``/``) or one whole
    key, chunks in one language, chunks touching a page range."""

    key_prefix: str | None = None
    language: str | None = None
    pages: tuple[int, int] | None = None

    def __bool__(self) -> bool:
        return bool(self.key_prefix or self.language or self.pages)

    def as_dict(self) -> dict[str, Any]:
        """The fields that are set, as the search API's ``filter`` takes them."""
        out: dict[str, Any] = {"key_prefix": self.key_prefix, "language": self.language,
                               "pages": list(self.pages) if self.pages else None}
        return {k: v for k, v in out.items() if v is not None}

    def keeps(self, payload: dict[str, Any]) -> bool:
        """Whether a point with ``payload`` passes (what the store's own filter does, for a
        store that filters in Python)."""
        if self.key_prefix and self.key_prefix not in (payload.get(PREFIXES) or ()):
            return False
        if self.language and payload.get(LANGUAGE) != self.language:
            return False
        if self.pages and not any(self.pages[0] <= p <= self.pages[1] for p in payload.get(PAGES) or ()):
            return False
        return True
