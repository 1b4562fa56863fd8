"""The index signature: what a document's points are made with.

The embedder (by its weights' digest and its prefixes), the sparse scheme and the chunking (how a document
is read and cut, ``kb.chunking.CHUNKING_VERSION``). The ledger keeps it per document; a
different one makes an indexed document work again (a configuration change, or an upgrade
that reads documents differently), reusing its stored page results: no page is read again.
"""

from __future__ import annotations

from functools import lru_cache

from kb import chunking
from kb.embedding import make_embedder
from kb.settings import PipelineSettings
from kb.sparse import SparseEncoder


def signature_of(embedder_id: str, sparse_tokenizer: str) -> str:
    return f"{embedder_id}|{SparseEncoder(sparse_tokenizer).signature}|{chunking.CHUNKING_VERSION}"


@lru_cache(maxsize=8)
def _embedder_id(model_dir: str | None, backend: str, profile: str | None, state_dir: str) -> str:
    settings = PipelineSettings(embed_model_dir=model_dir, embed_backend=backend, embed_profile=profile,
                                state_dir=state_dir)
    return make_embedder(settings).model_id


def index_signature(settings: PipelineSettings) -> str:
    """The signature the current settings make (hashes the embedder's weights once: ~0.6 s)."""
    model_dir = str(settings.embed_model_dir) if settings.embed_model_dir else None
    return signature_of(_embedder_id(model_dir, settings.embed_backend, settings.embed_profile, str(settings.state_dir)),
                        settings.sparse_tokenizer)
