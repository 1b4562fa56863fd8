"""What a reviewer can decide about a quarantined version: its own module, without the
ledger's imports, so that the ``kb_review`` DAG (at parse time) and the ``kb`` command (at
start-up) read the choices from here instead of copying them."""

from __future__ import annotations

from enum import StrEnum


class Decision(StrEnum):
    """What a reviewer decided about a quarantined version (``kb_review``)."""

    ACCEPT = "accept"  # index the pages that passed: the pages gate is not applied to this version
    REEXTRACT_OCR = "reextract-ocr"  # read every page with the OCR backend, no text layer
    REEXTRACT_LIMITS = "reextract-limits"  # read again, failed pages too, with other quality thresholds
    DROP = "drop"  # leave it out of the index; it leaves the review queue

    @property
    def reopens(self) -> bool:
        """Whether the decision makes the quarantined version due again."""
        return self is not Decision.DROP
