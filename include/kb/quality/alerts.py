"""What the ops team receives when a document fails: built from its quarantine record, or
from the record of the pages a version was indexed without.

The same facts go to e-mail (HTML) and to a Slack-compatible webhook (``text`` plus
``blocks``): document and version, run, why, each failed expectation with its
observed value and threshold (or each failed page with its reason), and where the
report and the Data Docs are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kb import channels
from kb.artifacts import AlertEvent


@dataclass
class Alert:
    event: AlertEvent
    doc_id: str
    key: str
    version: str
    run_id: str
    code: str
    message: str
    failures: list[str]
    report: str  # s3://bucket/key of the quarantine record
    docs_url: str | None

    @classmethod
    def from_record(cls, record: dict[str, Any], artifacts_bucket: str) -> "Alert":
        validation = record.get("validation") or {}
        failures = [
            f"[{gate.get('suite')}] {f['line']}"
            for gate in validation.get("gates", [])
            for f in gate.get("failures", [])
        ] + [f"page {p['page']}: {p.get('reason')}" for p in record.get("failed_pages", [])]
        return cls(
            event=AlertEvent(record.get("event", AlertEvent.QUARANTINED)), doc_id=record["doc_id"], key=record["key"],
            version=str(record.get("version_id") or record.get("etag") or "?"),
            run_id=record.get("run_id") or "", code=record.get("code") or "unknown", message=record.get("message") or "",
            failures=failures, report=f"s3://{artifacts_bucket}/{record['record']}",
            docs_url=validation.get("docs_url"),
        )

    @property
    def subject(self) -> str:
        if self.event == AlertEvent.PAGES_FAILED:
            return f"[kb] indexed {self.key} without {len(self.failures)} page(s)"
        return f"[kb] quarantined {self.key} ({self.code})"

    def lines(self) -> list[str]:
        out = [
            f"Document: {self.key} (doc_id {self.doc_id})",
            f"Version: {self.version}",
            f"Run: {self.run_id}",
            f"Why: {self.code}: {self.message}",
        ]
        out += [f"Failed: {f}" for f in self.failures]
        out.append(f"Report: {self.report}")
        if self.docs_url:
            out.append(f"Data Docs: {self.docs_url}")
        if self.event == AlertEvent.PAGES_FAILED:
            out.append("The rest of the document is searchable; a new version, or a forced run, reads these pages again.")
        else:
            out.append("The previously indexed version, if any, stays searchable.")
        return out

    def text(self) -> str:
        return "\n".join(self.lines())

    def html(self) -> str:
        return channels.html_body(self.subject, self.lines())

    def slack(self) -> dict[str, Any]:
        return channels.slack_payload(self.subject, self.lines(), {
            "event": self.event.value, "doc_id": self.doc_id, "key": self.key, "version": self.version,
            "run_id": self.run_id, "code": self.code, "failures": self.failures, "report": self.report,
            "docs_url": self.docs_url})
