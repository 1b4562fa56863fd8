"""The pipeline's typed errors: the ones its stages, its store wrappers and its services
raise on purpose. A client's errors live beside that client (``kb.ocr_client``,
``kb.search.client``) and the workbench's in ``kb_dev.errors``; all are ``KbError``.

Document errors carry a stable ``code`` that ends up in quarantine records and alerts. The
class decides what happens to a document: a ``DocumentError`` (or the engine's
``InputError``) is quarantined and never retried; anything else fails the attempt, and the
ledger tries the version again after a backoff, up to ``KB_MAX_ATTEMPTS`` attempts
(``kb.pipeline.records.fail``).
"""

from __future__ import annotations


class KbError(Exception):
    """Base class of the pipeline's own errors."""

    code = "kb_error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


# --- bad input: a document that can never succeed as it is --------------------------


class DocumentError(KbError):
    """A document that cannot be indexed as it is: quarantined, never retried. (Bad input
    found while opening a PDF is ``ocr_engine.api.errors.InputError``, with its own codes.)"""

    code = "document_error"


class ValidationFailed(DocumentError):
    """A data-quality gate failed: the version is quarantined with the gate's report."""

    code = "validation_failed"

    def __init__(self, message: str, report: dict) -> None:
        super().__init__(message)
        self.report = report  # kb.quality.gate.GateReport.as_dict()


class IndexMismatch(KbError):
    """The collection was made for other vectors (another dimension, no sparse vector)."""

    code = "index_mismatch"


class EvalSetError(KbError):
    """A question set that cannot be used: the message names the file and line."""

    code = "bad_eval_set"


class ModelExportFailed(KbError):
    """The embedding model could not be exported to ONNX (its folder is incomplete or broken)."""

    code = "model_export_failed"


class BadParams(KbError):
    """A run's params cannot be used (an unknown or out-of-range threshold): fail fast, no retry."""

    code = "bad_params"


# --- infrastructure: a later attempt may pass -------------------------------------------------


class InfrastructureError(KbError):
    """Something outside the document failed (storage, the OCR service, the store): the
    same version may succeed in a later attempt."""

    code = "infrastructure_error"


class ObjectChanged(InfrastructureError):
    """The object's bytes differ from what the plan saw (overwritten mid-run)."""

    code = "object_changed"


class IncompleteExtraction(InfrastructureError):
    """A range planned for a document has no result (its extract task failed): the
    document is tried again in a later run."""

    code = "incomplete_extraction"


class RangeRefused(InfrastructureError):
    """The OCR service refused a page range for one of its limits, not for the document:
    the range is split and its halves tried, never sent again whole."""

    code = "range_refused"


class RangeTooLarge(RangeRefused):
    """Too many pages, bytes or KV cache for one request (413)."""

    code = "range_too_large"


class RangeTimedOut(RangeRefused):
    """The engine worked past the service's request timeout (504)."""

    code = "range_timeout"


class ExtractionFailed(InfrastructureError):
    """The OCR engine failed on some pages of a range (a model or service error)."""

    code = "extraction_failed"


class StorageUnavailable(InfrastructureError):
    """The S3 server cannot be reached or answered with a server error: try again later."""

    code = "storage_unavailable"


class StorageRefused(KbError):
    """The S3 server refused a request for a reason of its own (a wrong key, access denied,
    no such bucket): fixing the deployment helps, retrying the same request does not."""

    code = "storage_refused"

    def __init__(self, message: str, s3_code: str) -> None:
        super().__init__(message)
        self.s3_code = s3_code


class CorruptArtifact(InfrastructureError):
    """A stored result does not match the checksum written with it (a torn or altered
    write): it is never used; the work that made it is done again."""

    code = "corrupt_artifact"


class ObjectMissing(KbError):
    """The object (or that version of it) is not in the bucket."""

    code = "object_missing"


class ObjectTooLarge(KbError):
    """The object is over the size its reader takes; nothing past the cap was read."""

    code = "object_too_large"


class StoreWriteFailed(InfrastructureError):
    """A write to the vector store failed (server error, disk, lost connection); the
    document's points of this version are withdrawn and it is tried again later."""

    code = "store_write_failed"


class StoreBusy(InfrastructureError):
    """The embedded store's shard is held by another process (the search service's copies),
    or none of those copies answered."""

    code = "store_busy"


class LedgerConflict(InfrastructureError):
    """An entry kept changing under a writer's compare-and-set past its retries."""

    code = "ledger_conflict"


class LedgerUnavailable(InfrastructureError):
    """The ledger database cannot be reached or failed a statement: try again later."""

    code = "ledger_unavailable"


# --- the review queue ---------------------------------------------------------------


class NotUnderReview(KbError):
    """A review decision about a document whose current version is not quarantined."""

    code = "not_under_review"


class ReviewedAnotherVersion(NotUnderReview):
    """A decision about a version that is no longer the quarantined one: a newer version
    landed (and was quarantined) while the reviewer looked at the older."""

    code = "reviewed_another_version"


class AlreadyDecided(NotUnderReview):
    """A second decision about one version: the version already has one that no run has
    taken up yet (or a ``drop``), or another review run's reviewer gave one first. The first
    stands; the version left the review queue with it."""

    code = "already_decided"
