"""A tiny random sentence-transformers model saved locally: a real embedder of another dimension."""

from __future__ import annotations

import json
import shutil
from pathlib import Path


def tiny_embedder_dir(folder: Path, dimension: int = 32) -> Path:
    from transformers import BertConfig, BertModel

    from kb.embedding import default_model_dir

    source = default_model_dir()
    target = folder / "tiny-embedder"
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("*.safetensors", "README.md"))
    base = json.loads((source / "config.json").read_text())
    config = BertConfig(vocab_size=base["vocab_size"], hidden_size=dimension, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=2 * dimension,
                        max_position_embeddings=base["max_position_embeddings"])
    BertModel(config).save_pretrained(target)
    pooling = json.loads((target / "1_Pooling" / "config.json").read_text())
    pooling["word_embedding_dimension"] = dimension
    (target / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    return target
