"""Hybrid search fuses its dense and sparse lists here (``kb.store.model.fuse``), on Edge and on
a server alike. It must weigh ranks as qdrant-client's fusion does, which fused them before:
when the constant drifted to the literature's 60, ``kb eval``'s cross-page group fell from
0.935 to 0.871 on the same store."""

from __future__ import annotations

import random

import pytest
from qdrant_client.http import models
from qdrant_client.hybrid.fusion import reciprocal_rank_fusion

from kb.store.model import fuse


def _ranked(rng: random.Random, pool: list[str], n: int) -> list[tuple[str, float]]:
    # distinct scores: the two fusions order ties differently (ours by id, qdrant-client's by arrival)
    return [(point, 1.0 - i / n) for i, point in enumerate(rng.sample(pool, n))]


@pytest.mark.parametrize("weights", [[1.0, 1.0], [0.5, 1.0], [2.0, 0.3]])
def test_fusion_gives_qdrant_clients_scores_and_order(weights):
    rng = random.Random(7)
    pool = [f"p{i:03d}" for i in range(60)]
    for _ in range(50):
        lists = [_ranked(rng, pool, 28), _ranked(rng, pool, 28)]
        ours = fuse(lists, weights, top_k=5)
        theirs = reciprocal_rank_fusion(
            [[models.ScoredPoint(id=i, version=0, score=s) for i, s in hits] for hits in lists],
            limit=len(pool), weights=weights)  # all of them: ties at the cut are ours to order
        theirs_scores = {p.id: p.score for p in theirs}
        assert [i for i, _ in ours] == sorted(theirs_scores, key=lambda i: (-theirs_scores[i], i))[:5]
        assert [s for _, s in ours] == pytest.approx([theirs_scores[i] for i, _ in ours])


def test_a_point_first_in_one_list_beats_one_fourth_in_both():
    """What the constant decides: with qdrant-client's, a list's top counts for more than
    agreement lower down (1/1 + 1/(k+7) > 2/(k+3) at k = 2; not at k = 60)."""
    dense = [("top", 0.9), ("a", 0.8), ("b", 0.7), ("both", 0.6)]
    sparse = [("c", 9.0), ("d", 8.0), ("e", 7.0), ("both", 6.0)] + [(f"x{i}", 5.0 - i) for i in range(8)] + [("top", 0.1)]
    assert fuse([dense, sparse], [1.0, 1.0], top_k=1)[0][0] == "top"
