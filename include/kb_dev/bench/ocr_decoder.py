"""The decoder alone, with random weights: build it, bring its cache to T, time decoding there.

``generate`` needs T steps to reach T generated tokens; at 15-25 ms a step on an H200 that is
over ten minutes for T = 32,768 and each cache kind. Here the cache is instead filled the
way it would be filled by decoding: one forward over the L_m reference tokens (the R-SWA
layer takes its first update as the reference part), then the T generated token ids in
chunks, positions continuing. tests/unit/test_bench_ocr_decoder.py checks that this
leaves the same cache and the same next-token logits as feeding the tokens one at a time.
Then ``steps`` single-token greedy forwards are timed from that state.

Both sides run on the same cache class (``BENCH_CACHE_KIND``, static): transformers'
``StaticCache`` builds a ``StaticLayer`` per full-attention layer and the model's static
R-SWA layer per R-SWA one, so the gap in ms per token is the attention's, not the cache's.
A static full cache is allocated for every token it will see, L_m + T plus the decoded
steps; the R-SWA one holds L_m + window (generate's cache after T + 1 generated tokens: the
newest is cached by the next step). The engine itself gives a full-attention decoder the
dynamic cache (``cache_kind``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

# The released decoder: 12 layers, hidden 1280, 10 KV heads of 128; 61,440 B a cached token in bf16.
REAL_LAYERS, REAL_KV_HEADS, REAL_HEAD_DIM, REAL_BYTES_PER_TOKEN = 12, 10, 128, 61_440
REAL_HIDDEN, REAL_INTERMEDIATE = 1280, 6848
# Issue 14: decoding at the largest T may cost at most this much more than at the smallest, with R-SWA.
RSWA_MS_RATIO_TARGET = 1.15
# Tokens per fill forward. The attention scores of one chunk are chunk x (L_m + T) x 10 heads; at
# 1,024 x 36,864 that is 0.75 GB in bf16 (1.5 GB if softmax runs in fp32), per layer, freed after it.
FILL_CHUNK = 1024
DEFAULT_CHECKPOINTS = (128, 512, 2048, 8192, 32768)
# The cache class both sides of a full vs R-SWA comparison use (issue 21: the full cache ran on
# the dynamic class and R-SWA on the static one, so part of the gap was the class).
BENCH_CACHE_KIND = "static"


def decoder_model(layers: int, window: int, vocab: int, full: bool, dtype, device, *,
                  hidden: int = REAL_HIDDEN, heads: int = REAL_KV_HEADS, intermediate: int = REAL_INTERMEDIATE):
    """The real decoder's shape (or a smaller one, for tests) with a tiny vision tower; ``full``: every
    layer full attention, else every layer R-SWA with ``window``."""
    import torch
    from transformers import UnlimitedOcrConfig, UnlimitedOcrForConditionalGeneration
    from transformers.models.unlimited_ocr.configuration_unlimited_ocr import (
        UnlimitedOcrTextConfig,
        UnlimitedOcrVisionConfig,
    )

    text = UnlimitedOcrTextConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=1 << 17,
        mlp_layer_types=["dense"] * layers, sliding_window=window, bos_token_id=0, eos_token_id=1, pad_token_id=2,
        layer_types=["full_attention" if full else "reference_sliding_attention"] * layers,
    )
    tiny_vision = UnlimitedOcrVisionConfig(
        sam_config={"hidden_size": 32, "output_channels": 16, "num_hidden_layers": 1, "num_attention_heads": 4,
                    "image_size": 64, "patch_size": 16, "mlp_dim": 64, "window_size": 2, "global_attn_indexes": [0],
                    "downsample_channels": [32, 64]},
        encoder_config={"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
                        "num_attention_heads": 4, "image_size": 64, "patch_size": 16},
    )
    torch.manual_seed(0)
    config = UnlimitedOcrConfig(vision_config=tiny_vision, text_config=text, image_token_id=vocab - 1)
    return UnlimitedOcrForConditionalGeneration(config).to(device=device, dtype=dtype).eval()


def cache_kind(model) -> str:
    """The engine's choice: a full-attention decoder gets the dynamic cache, an R-SWA one the static."""
    types = set(model.config.get_text_config().layer_types)
    return "dynamic" if types == {"full_attention"} else "static"


def new_cache(model, max_len: int, kind: str | None = None):
    """A cache for ``max_len`` tokens of ``kind`` (static or dynamic); by default the engine's choice."""
    from ocr_engine.unlimited.cache import build_cache

    return build_cache(model.config.get_text_config(), kind or cache_kind(model), max_len)


def layer_class(cache) -> str:
    """The class of the cache's layers, as built (one name: every layer of these decoders is alike)."""
    return ",".join(sorted({type(layer).__name__ for layer in cache.layers}))


def forward(model, cache, ids, start: int):
    """One forward of ``ids`` at positions ``start...``; the logits of the last position only."""
    import torch

    positions = torch.arange(start, start + ids.shape[1], device=ids.device).unsqueeze(0)
    out = model(input_ids=ids, cache=cache, position_ids=positions, use_cache=True, logits_to_keep=1)
    return out.logits[:, -1]


def fill(model, cache, reference, generated, chunk: int = FILL_CHUNK):
    """Prefill ``reference`` in one forward, then ``generated`` in chunks; the last position's logits."""
    logits = forward(model, cache, reference, 0)
    start = reference.shape[1]
    for lo in range(0, generated.shape[1], chunk):
        part = generated[:, lo:lo + chunk]
        logits = forward(model, cache, part, start)
        start += part.shape[1]
    return logits


def decode(model, cache, logits, start: int, steps: int):
    """``steps`` greedy single-token forwards from ``logits``; returns the last logits."""
    for i in range(steps):
        logits = forward(model, cache, logits.argmax(-1, keepdim=True), start + i)
    return logits


@dataclass
class Measurement:
    T: int
    cache_bytes: int  # after the fill, before the timed steps
    ms_per_token: float
    fill_s: float
    layer_class: str  # the cache layers' class, as built


def measure(model, reference, generated, steps: int = 32, chunk: int = FILL_CHUNK, warmup: int = 2,
            kind: str = BENCH_CACHE_KIND) -> Measurement:
    """Fill a fresh cache of ``kind`` to T = ``generated.shape[1]``, then time ``steps`` decoding
    steps after ``warmup`` untimed ones."""
    import torch

    from ocr_engine.unlimited.cache import cache_bytes

    device = reference.device
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    prefix, t = reference.shape[1], generated.shape[1]
    # Room for every token it will see, as the engine sizes it (prompt + max new), and never under
    # L_m + window: a static R-SWA cache sized below that keeps only part of the reference.
    window = model.config.get_text_config().sliding_window
    cache = new_cache(model, prefix + max(t + warmup + steps, window), kind)
    with torch.inference_mode():
        sync()
        began = time.perf_counter()
        logits = fill(model, cache, reference, generated, chunk)
        held = cache_bytes(cache)
        logits = decode(model, cache, logits, prefix + t, warmup)
        sync()
        filled = time.perf_counter()
        decode(model, cache, logits, prefix + t + warmup, steps)
        sync()
        done = time.perf_counter()
    return Measurement(T=t, cache_bytes=held, ms_per_token=round(1000 * (done - filled) / steps, 3),
                       fill_s=round(filled - began, 3), layer_class=layer_class(cache))


def checkpoints_for(max_t: int, given: str | None = None) -> list[int]:
    """``given`` (a comma list) or the default ladder, each capped to ``max_t``."""
    values = [int(v) for v in given.split(",")] if given else list(DEFAULT_CHECKPOINTS)
    return sorted({min(v, max_t) for v in values if v > 0})


def kv_cache_fill(layers: int, prefix: int, window: int, checkpoints: list[int], vocab: int, device: str,
                  steps: int = 32, chunk: int = FILL_CHUNK) -> dict:
    """Full cache against R-SWA at each T in ``checkpoints``, each by a fresh fill; the report
    ``python -m kb_dev.bench.ocr kv-cache --method fill`` prints (without its plot)."""
    import torch

    from ocr_engine.unlimited.cache import bytes_per_token

    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    gen = torch.Generator().manual_seed(1)
    reference = torch.randint(3, vocab - 2, (1, prefix), generator=gen).to(device)
    generated = torch.randint(3, vocab - 2, (1, max(checkpoints)), generator=gen).to(device)
    results, gpu_peak, fill_seconds, attn = {}, {}, {}, None
    for name, full in (("full", True), ("rswa", False)):
        model = decoder_model(layers, window, vocab, full, dtype, device)
        attn = model.config.get_text_config()._attn_implementation
        # the same warm-up on both sides: kernels, allocator
        measure(model, reference, generated[:, :checkpoints[0]], steps, chunk)
        if device == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        results[name] = {t: measure(model, reference, generated[:, :t], steps, chunk) for t in checkpoints}
        if device == "cuda":  # weights, the largest fill's activations and its cache
            gpu_peak[name] = torch.cuda.max_memory_allocated()
        fill_seconds[name] = round(sum(m.fill_s for m in results[name].values()), 2)
        del model
    per_token = bytes_per_token(layers, REAL_KV_HEADS, REAL_HEAD_DIM, dtype)
    rows = [{"T": t, "full_bytes": results["full"][t].cache_bytes, "rswa_bytes": results["rswa"][t].cache_bytes,
             "full_ms_per_token": results["full"][t].ms_per_token,
             "rswa_ms_per_token": results["rswa"][t].ms_per_token} for t in checkpoints]
    first, last = rows[0], rows[-1]
    rswa_ratio = round(last["rswa_ms_per_token"] / first["rswa_ms_per_token"], 3)
    bound = per_token * (prefix + window)
    return {
        "method": "fill", "device": device, "dtype": str(dtype).replace("torch.", ""), "layers": layers,
        "kv_heads": REAL_KV_HEADS, "head_dim": REAL_HEAD_DIM, "vocab": vocab,
        "torch": torch.__version__, "attn_implementation": attn,
        "bytes_per_token": round((last["full_bytes"] - first["full_bytes"]) / max(1, last["T"] - first["T"]), 1),
        "bytes_per_token_theoretical": per_token, "real_bytes_per_token": REAL_BYTES_PER_TOKEN,
        "prefix_tokens": prefix, "window": window, "steps_timed": steps, "fill_chunk": chunk,
        "cache_layers": {name: results[name][checkpoints[-1]].layer_class for name in results},
        "rows": rows,
        "fill_seconds": fill_seconds,
        **({"gpu_peak_allocated_bytes": gpu_peak} if gpu_peak else {}),
        "checks": {
            # static: allocated for L_m + T + the decoded steps, so one token's bytes more per token of T
            "full_bytes_grow_per_token_of_T": all(b["full_bytes"] - a["full_bytes"] == per_token * (b["T"] - a["T"])
                                                  for a, b in zip(rows, rows[1:])),
            "rswa_bytes_flat_after_window": len({r["rswa_bytes"] for r in rows if r["T"] >= window}) <= 1,
            "rswa_bytes_vs_bound": round(last["rswa_bytes"] / bound, 5),
            "rswa_ms_ratio_largest_T_over_smallest": rswa_ratio,
            "full_ms_ratio_largest_T_over_smallest": round(last["full_ms_per_token"] / first["full_ms_per_token"], 3),
            "rswa_ms_ratio_target": RSWA_MS_RATIO_TARGET,
            "rswa_ms_ratio_within_target": rswa_ratio <= RSWA_MS_RATIO_TARGET,
        },
    }
