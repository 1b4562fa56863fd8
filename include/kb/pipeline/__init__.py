"""The ingestion pipeline, one module per stage; the DAG's tasks call them one-to-one.

- ``sense``: list the inbox, compare it with the ledger.
- ``plan``: open each document once, quarantine bad input, cut page ranges from the
  limits the OCR service (or the engine) publishes.
- ``extract``: read one page range, splitting it when a limit refuses it.
- ``index``: gate, chunk, embed, upsert a batch of documents; ``retire`` deleted ones.
- ``records``: the ledger and the quarantine.
- ``alerts``: which alerts a run owes, exactly once each.
- ``report``: the run summary.

Every stage reads and writes durable state (object store, ledger, Qdrant) and returns
small typed records (``messages``), never document text, so Airflow's XCom stays tiny
and any stage can be rerun: results are keyed by content hash, points by deterministic
ids. ``Context`` binds a stage to its stores and settings.
"""

from kb.pipeline.context import Context

__all__ = ["Context"]
