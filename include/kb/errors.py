"""Every error the pipeline raises on purpose, in one place.

Document errors carry a stable ``code`` that ends up in quarantine records and
alerts; ``retryable`` says whether running the same input again can succeed,
so nothing that cannot succeed is retried.
"""

from __future__ import annotations


class KbError(Exception):
    """Base class of the pipeline's own errors."""

    code = "kb_error"
    retryable = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


# --- bad input: a document that can never succeed as it is --------------------------


class DocumentError(KbError):
    """A document that cannot be indexed as it is: quarantined, never retried. (Bad input
    found while opening a PDF is ``ocr_engine.errors.InputError``, with its own codes.)"""

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


# --- infrastructure: worth retrying -------------------------------------------------


class InfrastructureError(KbError):
    code = "infrastructure_error"
    retryable = True


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
    """The local Qdrant store stayed locked by another process past the wait."""

    code = "store_busy"


class LedgerUnavailable(InfrastructureError):
    """The ledger database cannot be reached or failed a statement: try again later."""

    code = "ledger_unavailable"


# --- the local stack ----------------------------------------------------------------


class StackError(KbError):
    code = "stack_error"


class PortInUse(StackError):
    code = "port_in_use"


class ServiceDidNotStart(StackError):
    code = "service_did_not_start"


class StackNotRunning(StackError):
    code = "stack_not_running"


class AirflowApiError(KbError):
    code = "airflow_api_error"


class AirflowNotFound(AirflowApiError):
    """The API answered 404: no such DAG, run, task or human-in-the-loop request."""

    code = "airflow_not_found"


class AirflowConflict(AirflowApiError):
    """The API answered 409: e.g. a human-in-the-loop request that was answered already."""

    code = "airflow_conflict"


# --- the review queue ---------------------------------------------------------------


class NotUnderReview(KbError):
    """A review decision about a document whose current version is not quarantined."""

    code = "not_under_review"
