"""The pipeline exporter against the real S3 server and a SQLite ledger: what it publishes is
what the run summaries, the ledger and the inbox say, with no document key in a label; a
source it cannot read is counted and the others still answer."""

from __future__ import annotations

from dataclasses import replace

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kb.artifacts import ArtifactKeys
from kb.ledger import LedgerEntry, Status, doc_id_for
from kb.ledger_db import Ledger
from kb.observe.exporter import PipelineCollector
from kb.pipeline.report import save_summary
from kb.settings import PipelineSettings


def _scrape(collector) -> dict[tuple[str, tuple], float]:
    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_the_exporter_publishes_what_the_summaries_ledger_and_inbox_hold(kb_env):
    store, settings = kb_env["store"], PipelineSettings()
    ledger = Ledger.for_settings(settings, store)
    indexed = store.put_bytes(kb_env["inbox"], "customer-7/indexed.pdf", b"%PDF-1.7 one")
    waiting = store.put_bytes(kb_env["inbox"], "customer-7/waiting.pdf", b"%PDF-1.7 two")
    ledger.put(LedgerEntry.new(indexed, Status.INDEXED))
    save_summary(store, kb_env["artifacts"], "manual__1", {
        "documents_indexed": 1, "documents_quarantined": 1, "documents_failed": 0,
        "quarantine": [{"key": "customer-7/bad.pdf", "code": "corrupt_pdf"}],
        "pages_by_backend": {"textlayer": 4}, "ocr": {"pages": 0, "device_seconds": 0.0},
        "documents": [{"key": "customer-7/indexed.pdf", "status": "indexed", "searchable_seconds": 95.0}],
        "finished_at": "2026-12-01T10:00:00+00:00"})
    collector = PipelineCollector(store, settings, ledger, min_interval_s=0)

    got = _scrape(collector)
    assert got[("kb_pipeline_documents_total", (("outcome", "indexed"),))] == 1
    assert got[("kb_pipeline_quarantined_total", (("code", "corrupt_pdf"),))] == 1
    assert got[("kb_pipeline_pages_total", (("backend", "textlayer"),))] == 4
    assert got[("kb_pipeline_landing_to_searchable_seconds_bucket", (("le", "60.0"),))] == 0
    assert got[("kb_pipeline_landing_to_searchable_seconds_bucket", (("le", "120.0"),))] == 1
    assert got[("kb_pipeline_last_success_timestamp_seconds", ())] == 1796119200.0
    assert got[("kb_ledger_documents", (("status", "indexed"),))] == 1
    assert got[("kb_inbox_pending_documents", ())] == 1  # waiting.pdf
    assert not any("customer-7" in value for _, labels in got for _, value in labels)

    # a second run's summary adds to the counters; the indexed document leaves the work
    ledger.put(LedgerEntry.new(waiting, Status.INDEXED))
    save_summary(store, kb_env["artifacts"], "manual__2", {
        "documents_indexed": 1, "documents_failed": 1, "finished_at": "2026-12-01T11:00:00+00:00"})
    got = _scrape(collector)
    assert got[("kb_pipeline_documents_total", (("outcome", "indexed"),))] == 2
    assert got[("kb_pipeline_runs_total", (("result", "failed"),))] == 1
    assert got[("kb_pipeline_last_success_timestamp_seconds", ())] == 1796119200.0  # the failed run is not one
    assert got[("kb_pipeline_last_run_timestamp_seconds", ())] == 1796122800.0
    assert got[("kb_inbox_pending_documents", ())] == 0

    # the second run's report ran again: its new summary replaces the old one, not beside it
    save_summary(store, kb_env["artifacts"], "manual__2", {
        "documents_indexed": 2, "documents_failed": 0, "finished_at": "2026-12-01T11:05:00+00:00"})
    # and a marker that lands late (a clock behind, a slow store), inside the overlap, still counts
    save_summary(store, kb_env["artifacts"], "manual__3", {
        "documents_indexed": 5, "documents_failed": 0, "finished_at": "2026-12-01T11:04:00+00:00"})
    got = _scrape(collector)
    assert got[("kb_pipeline_documents_total", (("outcome", "indexed"),))] == 1 + 2 + 5
    assert got[("kb_pipeline_runs_total", (("result", "failed"),))] == 0
    assert got[("kb_pipeline_runs_total", (("result", "success"),))] == 3
    assert _scrape(collector) == got  # nothing new: the same totals, nothing read twice


def test_the_exporter_keeps_a_bounded_number_of_summaries(kb_env):
    from kb.observe.exporter import RunLog

    store = kb_env["store"]
    for i in range(12):
        save_summary(store, kb_env["artifacts"], f"manual__{i}", {
            "documents_indexed": 1, "finished_at": f"2026-12-01T10:{i:02d}:00+00:00"})
    runs = RunLog(store, kb_env["artifacts"], recent=5)
    assert runs.update().documents["indexed"] == 12 and runs.kept() == 5
    for i in range(12, 20):
        save_summary(store, kb_env["artifacts"], f"manual__{i}", {
            "documents_indexed": 1, "finished_at": f"2026-12-01T10:{i:02d}:00+00:00"})
    assert runs.update().documents["indexed"] == 20 and runs.kept() == 5


def test_an_unreadable_ledger_is_counted_and_the_runs_are_still_published(kb_env, tmp_path):
    store, settings = kb_env["store"], PipelineSettings()
    save_summary(store, kb_env["artifacts"], "manual__1", {"documents_indexed": 3, "finished_at": "2026-12-01T10:00:00+00:00"})
    (tmp_path / "a-file").write_text("not a folder")
    broken = Ledger(f"sqlite:///{tmp_path}/a-file/ledger.db")  # cannot be opened, nor created
    got = _scrape(PipelineCollector(store, settings, broken, min_interval_s=0))
    assert got[("kb_pipeline_documents_total", (("outcome", "indexed"),))] == 3
    assert got[("kb_exporter_source_errors_total", (("source", "ledger"),))] == 1
    assert ("kb_ledger_documents", (("status", "indexed"),)) not in got


def test_the_reread_backlog_counts_indexed_documents_read_otherwise_than_the_newest_run_reads(kb_env):
    """After an upgrade of the reading rules or a switch of OCR model, how many indexed
    documents a ``reread`` would take up, by why: what the operator watches go down folder by
    folder. The reader is the newest run's (its plan's limits), not a run that ended earlier."""
    store, settings = kb_env["store"], PipelineSettings()
    ledger = Ledger.for_settings(settings, store)
    read = {"current.pdf": (["1"], []), "scan.pdf": (["1"], ["ppocr:old"]), "older.pdf": ([""], []),
            "unrecorded.pdf": (None, None), "bad.pdf": (["1"], ["ppocr:old"])}
    for name, (versions, models) in read.items():
        obj = store.put_bytes(kb_env["inbox"], f"archive/{name}", b"%PDF-1.7 " + name.encode())
        status = Status.QUARANTINED if name == "bad.pdf" else Status.INDEXED
        ledger.put(replace(LedgerEntry.new(obj, status), extraction_versions=versions, ocr_models=models))
    collector = PipelineCollector(store, settings, ledger, min_interval_s=0)
    save_summary(store, kb_env["artifacts"], "manual__1", {"documents_indexed": 0, "finished_at": "2026-12-01T10:00:00+00:00"})
    assert not [k for k in _scrape(collector) if k[0] == "kb_reread_pending_documents"], "no reader known yet"

    def backlog() -> dict[str, float]:
        return {dict(labels)["why"]: v for (name, labels), v in _scrape(collector).items()
                if name == "kb_reread_pending_documents"}

    save_summary(store, kb_env["artifacts"], "manual__2", {
        "documents_indexed": 0, "finished_at": "2026-12-01T11:00:00+00:00",
        "limits": {"extraction_version": "1", "ocr_model": "ppocr:new"}})
    assert backlog() == {"reading_rules": 1, "ocr_model": 1, "not_recorded": 1}
    # a run that ended before it does not say what reads now
    save_summary(store, kb_env["artifacts"], "manual__0", {
        "documents_indexed": 0, "finished_at": "2026-12-01T09:00:00+00:00",
        "limits": {"extraction_version": "1", "ocr_model": "ppocr:old"}})
    assert backlog() == {"reading_rules": 1, "ocr_model": 1, "not_recorded": 1}
    # the model switched back: the scan is current again; a reread of the older one empties its row
    save_summary(store, kb_env["artifacts"], "manual__3", {
        "documents_indexed": 0, "finished_at": "2026-12-01T12:00:00+00:00",
        "limits": {"extraction_version": "1", "ocr_model": "ppocr:old"}})
    ledger.update(doc_id_for(kb_env["inbox"], "archive/older.pdf"), lambda e: replace(e, extraction_versions=["1"]))
    assert backlog() == {"reading_rules": 0, "ocr_model": 0, "not_recorded": 1}
