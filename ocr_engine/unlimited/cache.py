"""The decoder's KV cache: building the R-SWA variant and measuring what it holds.

R-SWA keeps every reference token (page images and prompt, L_m) plus only the last
``window`` generated tokens, so its size is bounded by ``L_m + window`` tokens however
long the output grows. The static variant preallocates that bound once and writes in
place; the dynamic one re-concatenates the prefix at every step.
"""

from __future__ import annotations

import torch


def cache_bytes(cache) -> int:
    """Summed bytes of the key/value tensors the cache holds now (views counted once)."""
    total = 0
    for layer in getattr(cache, "layers", []):
        if getattr(layer, "all_keys", None) is not None:  # static R-SWA: one buffer, views into it
            names = ("all_keys", "all_values")
        else:
            names = ("keys", "values", "prefill_keys", "prefill_values")
        for name in names:
            tensor = getattr(layer, name, None)
            if isinstance(tensor, torch.Tensor):
                total += tensor.numel() * tensor.element_size()
    return total


def bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
    """Keys and values of one token across all layers: 12 x 10 x 128 x 2 x 2 B = 61,440 B in bf16."""
    return num_layers * num_kv_heads * head_dim * 2 * torch.tensor([], dtype=dtype).element_size()


def build_cache(text_config, kind: str, max_cache_len: int):
    """The cache ``generate`` should use: the model's R-SWA layers in static or dynamic form."""
    from transformers import DynamicCache, StaticCache

    if kind == "static":
        return StaticCache(config=text_config, max_cache_len=max_cache_len)
    if kind == "dynamic":
        return DynamicCache(config=text_config)
    raise ValueError(f"unknown cache kind {kind!r}: static or dynamic")
