"""``kb pools sync``: the Airflow pool ``gpu_ocr`` gets the slots the OCR replicas can hold.

Each replica publishes its capacity at ``GET /v1/limits``: on the ``unlimited`` backend
the KV budget as a number of sequences of a typical range (``kv.capacity_sequences``),
elsewhere its engine slots (``request.max_concurrency``). The pool is their sum, so
Airflow never sends more ranges at once than the GPUs can hold: a range past that waits
in Airflow's queue, not in a replica's (where it would time out or be refused).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

POOL = "gpu_ocr"  # the extract task's pool (dags/kb_ingest.py)
DESCRIPTION = "OCR page ranges on the GPU pool: the replicas' published capacity (kb pools sync)"


@dataclass(frozen=True)
class ReplicaCapacity:
    url: str
    sequences: int
    source: str  # "kv": the KV budget's sequences; "concurrency": engine slots

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def capacity_of(url: str, limits: dict[str, Any]) -> ReplicaCapacity:
    """One replica's capacity from the body of its ``GET /v1/limits``."""
    from ocr_engine.service.contract import PublishedLimits

    published = PublishedLimits.from_dict(limits)
    if published.kv is not None:
        return ReplicaCapacity(url, published.kv.capacity_sequences, "kv")
    return ReplicaCapacity(url, published.request.max_concurrency, "concurrency")


def replica_capacities(urls: list[str], api_key: str | None) -> list[ReplicaCapacity]:
    from kb.ocr_client import OcrClient

    return [capacity_of(url, OcrClient(url, api_key, retries=1).published_limits()) for url in urls]


def sync(airflow, replicas: list[ReplicaCapacity]) -> int:
    """Set the pool to the replicas' sum (at least 1: a pool of 0 would stop every range)."""
    slots = max(1, sum(r.sequences for r in replicas))
    airflow.set_pool(POOL, slots, DESCRIPTION)
    return slots
