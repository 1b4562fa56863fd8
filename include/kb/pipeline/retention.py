"""Stage 6, retention: the artifacts of deleted and superseded versions expire.

A sweep, not an S3 lifecycle rule. A rule selects objects by prefix, tag and age since
they were written; "superseded" is a fact of the ledger, and a superseded version's page
results sit beside the indexed version's under the same prefix, so no rule can tell them
apart. The local S3 server adds two reasons of its own (weed 4.48): it stores a bucket's
lifecycle rules, but evaluates them (noncurrent versions, versioned buckets) only in its
admin/worker processes, which ``weed server`` does not run; and on a bucket without
versioning an ``Expiration`` rule becomes a TTL stamped on each object as it is written,
which cannot be lifted later.

Each run, after indexing, in two bounded steps, the second first (so what a run finds waits
at least until the next run, whatever the retention):

1. **look**: at most ``SWEEP_DOCUMENTS`` documents whose ledger entry changed since the
   sweep last looked at them. Their page-result folders, quarantine folders and inbox
   object versions are listed, and what no kept version needs is written down with the
   time the wait started: when a deleted document was retired, when an inbox version
   stopped being the latest (no earlier than that), or else when the sweep first found it
   unneeded. What is needed again (a version restored) stops waiting.
2. **expire**: what has waited longer than ``KB_ARTIFACT_RETENTION_DAYS`` is checked
   against the ledger once more and removed, every version of every object under it, at
   most ``KB_RETENTION_SWEEP_OBJECTS`` object versions a run; the rest waits for the next.

A document keeps the page results of its latest and of its indexed version's content (a
re-index reads them instead of running OCR again), its latest version's quarantine folder
(the review queue), and its latest and its indexed inbox versions; never an inbox
object's latest version or a delete marker. A deleted document keeps nothing but records.
Records are never removed: ledger entries, quarantine and failed-pages records (they name
a version and why, not its text), alert markers, run summaries.

Running it twice removes nothing twice; a removal the server refuses (an identity without
delete rights) waits and is named in the result.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from kb.artifacts import ArtifactKeys
from kb.ledger import LedgerEntry, Status, now
from kb.ledger_db import Expiring
from kb.pipeline.context import Context
from kb.pipeline.messages import Swept

log = logging.getLogger(__name__)

SWEEP_DOCUMENTS = 500  # documents looked at per run: three listings each
REMOVED_SHOWN = 200  # removals named in the result (the count covers all)


def _iso(at: datetime) -> str:
    return at.astimezone(timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True)
class Kept:
    """What of one document no sweep removes."""

    folders: frozenset[str]  # artifacts folders
    versions: frozenset[str]  # inbox version ids

    @classmethod
    def of(cls, entry: LedgerEntry) -> "Kept":
        if entry.status == Status.DELETED:
            return cls(frozenset(), frozenset())
        shas = {entry.sha256, entry.indexed_sha256} - {None}
        folders = {ArtifactKeys.pages_folder(entry.doc_id, sha) for sha in shas}  # type: ignore[arg-type]
        folders.add(ArtifactKeys.quarantine_folder(entry.doc_id, entry.version_id or entry.etag))
        versions = {entry.version_id, entry.indexed_version_id} - {None}
        return cls(frozenset(folders), frozenset(versions))  # type: ignore[arg-type]

    def needs(self, item: Expiring) -> bool:
        return item.version_id in self.versions if item.version_id else item.name in self.folders


def unneeded(ctx: Context, entry: LedgerEntry, at: datetime) -> list[Expiring]:
    """What of ``entry``'s document no kept version needs, with the time its wait starts."""
    kept = Kept.of(entry)
    # a deleted document's artifacts wait from its retirement; a superseded version's from now
    since = entry.updated_at if entry.status == Status.DELETED else _iso(at)
    out = []
    for base in (ArtifactKeys.pages_of(entry.doc_id), ArtifactKeys.quarantine_of(entry.doc_id)):
        for folder in ctx.store.list_folders(ctx.artifacts, base):
            item = Expiring(ctx.artifacts, folder, None, entry.doc_id, since)
            if not kept.needs(item):
                out.append(item)
    versions = ctx.store.list_versions(entry.bucket, entry.key)
    latest = next((v for v in versions if v.is_latest), None)
    # every other version stopped being the latest no later than the latest was written
    version_since = _iso(latest.last_modified) if latest is not None and latest.last_modified else _iso(at)
    for v in versions:
        if v.is_latest or v.is_delete_marker or v.version_id is None:
            continue
        item = Expiring(entry.bucket, entry.key, v.version_id, entry.doc_id, version_since)
        if not kept.needs(item):
            out.append(item)
    return out


def look(ctx: Context, at: datetime, limit: int = SWEEP_DOCUMENTS) -> tuple[int, int]:
    """Step 1: (documents looked at, things found waiting among them)."""
    entries = ctx.ledger.unswept(ctx.settings.inbox_bucket, limit)
    found = 0
    for entry in entries:
        items = unneeded(ctx, entry, at)
        ctx.ledger.expiring_since(entry, items)
        found += len(items)
    return len(entries), found


def expire(ctx: Context, before: datetime, budget: int) -> tuple[list[dict], int, list[str]]:
    """Step 2: remove what waits since before ``before``, at most ``budget`` object versions.
    Returns (what was removed, object versions removed, error codes of refusals)."""
    due = ctx.ledger.expiring_due(_iso(before), budget)
    entries = ctx.ledger.get_many({d.doc_id for d in due})
    done: list[Expiring] = []
    removed: list[dict] = []
    refused: set[str] = set()
    objects = 0
    for item in due:
        if objects >= budget:
            break
        entry = entries.get(item.doc_id)
        if entry is None or Kept.of(entry).needs(item):
            done.append(item)  # needed again (or no longer known): it stops waiting, nothing is removed
            continue
        if item.version_id is None:
            tree = ctx.store.remove_tree(item.bucket, item.name, budget - objects)
            objects += tree.removed
            refused.update(tree.refused)
            count, size = tree.removed, tree.bytes
            if tree.left == 0:
                done.append(item)
        else:
            versions = {v.version_id: v for v in ctx.store.list_versions(item.bucket, item.name)}
            version = versions.get(item.version_id)
            count, size = 0, 0
            if version is None or version.is_latest:  # gone already, or restored as the latest: not ours
                done.append(item)
            else:
                errors = ctx.store.remove_versions(item.bucket, [(item.name, item.version_id)])
                if errors:
                    refused.update(errors.values())
                else:
                    count = 1
                    objects += 1
                    done.append(item)
        if count:
            removed.append({"bucket": item.bucket, "name": item.name, "version_id": item.version_id,
                            "doc_id": item.doc_id, "since": item.since, "objects": count, "bytes": size})
    ctx.ledger.expiring_done(done)
    return removed, objects, sorted(refused)


def sweep(ctx: Context, at: datetime | None = None) -> Swept:
    """One run's retention sweep (``at``: the time it takes as now)."""
    s = ctx.settings
    at = at or now()
    # Expire first, then look: what this sweep finds waits at least until the next one, so
    # KB_ARTIFACT_RETENTION_DAYS=0 removes at the next run, as documented, never in the run
    # that found it (a run that retires a document does not also delete its artifacts).
    removed, objects, refused = expire(ctx, at - timedelta(days=s.artifact_retention_days), s.retention_sweep_objects)
    looked_at, found = look(ctx, at)
    result = Swept(
        retention_days=s.artifact_retention_days, looked_at=looked_at, found=found, expired=len(removed),
        objects_removed=objects, bytes_removed=sum(r["bytes"] for r in removed), waiting=ctx.ledger.expiring_count(),
        refused=refused, removed=removed[:REMOVED_SHOWN],
    )
    for r in removed[:REMOVED_SHOWN]:
        log.info("retention: removed s3://%s/%s%s (%d object version(s), %d bytes; unneeded since %s)",
                 r["bucket"], r["name"], f" version {r['version_id']}" if r["version_id"] else "", r["objects"],
                 r["bytes"], r["since"])
    if refused:
        log.warning("retention: the S3 server refused some removals (%s); they wait for the next run",
                    ", ".join(refused))
    log.info("retention (%s days): looked at %d document(s), %d found unneeded; removed %d (%d object versions, "
             "%d bytes); %d waiting", s.artifact_retention_days, looked_at, found, len(removed), objects,
             result.bytes_removed, result.waiting)
    return result
