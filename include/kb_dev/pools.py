"""``kb pools sync``: the OCR pool (``gpu_ocr``) gets the slots the OCR replicas can hold.

Each replica publishes its capacity at ``GET /v1/limits``: on the ``unlimited`` backend
the KV budget as a number of sequences of a typical range (``kv.capacity_sequences``),
elsewhere its engine slots (``request.max_concurrency``). The pool is their sum, so
Airflow never sends more ranges at once than the GPUs can hold: a range past that waits
in Airflow's queue, not in a replica's (where it would time out or be refused).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from kb.ocr_client import OcrClient
from kb_airflow.names import OCR_POOL
from kb_dev.airflow_api import AirflowClient
from ocr_engine.api.contract import PublishedLimits

DESCRIPTION = "OCR page ranges on the GPU pool: the replicas' published capacity (kb pools sync)"


@dataclass(frozen=True)
class ReplicaCapacity:
    url: str
    sequences: int
    source: str  # "kv": the KV budget's sequences; "concurrency": engine slots

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def capacity_of(url: str, published: PublishedLimits) -> ReplicaCapacity:
    """One replica's capacity from what it publishes at ``GET /v1/limits``."""
    if published.kv is not None:
        return ReplicaCapacity(url, published.kv.capacity_sequences, "kv")
    return ReplicaCapacity(url, published.request.max_concurrency, "concurrency")


def replica_capacities(urls: list[str], api_key: str | None) -> list[ReplicaCapacity]:
    return [capacity_of(url, OcrClient(url, api_key, retries=1).published()) for url in urls]


def slots_for(replicas: list[ReplicaCapacity]) -> int:
    """The replicas' sum, at least 1: a pool of 0 would stop every range."""
    return max(1, sum(r.sequences for r in replicas))


def sync(airflow: AirflowClient, replicas: list[ReplicaCapacity]) -> int:
    """Set the pool to what the replicas hold; the slots set."""
    slots = slots_for(replicas)
    airflow.set_pool(OCR_POOL, slots, DESCRIPTION)
    return slots
