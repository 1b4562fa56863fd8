"""Batched R-SWA decoding against batch 1, through the engine's own ``batching.decode``.

    python -m kb_dev.bench.ocr batch --json                      # CPU, tiny dims, seconds
    python -m kb_dev.bench.ocr batch --device cuda --layers 12 --prefix 4096 --batches 1,8,32 --json

B rows of ``prefix`` random reference tokens each (one length: the batcher never pads)
decode ``new_tokens`` greedy tokens with the static R-SWA cache. Tokens per second for
each batch size; ``identical`` says every batched row's tokens equal its batch-1 run's,
token for token (checked on the first ``check_rows`` rows). On a CPU in fp32 they are
(measured); on a GPU in bf16 a batch may pick other kernels than batch 1 and round
differently, so a greedy row can drift at a near tie without any bug in the batching --
read ``identical`` there with that in mind. The end token's output row is zeroed so every
row runs its full length and the batches do the same work.

The largest batches are the admission arithmetic (``kv_budget.py``) on this device: the
capacity (a GPU's memory less weights and margin; a CPU's setting) over each sequence's
cache plus, on a GPU, the activations of its prefill (measured) -- for R-SWA, ``(prefix
+ window)`` tokens a sequence whatever T; for a full cache ``(prefix + long_t)``.
"""

from __future__ import annotations

import time

from kb_dev.bench.ocr_decoder import decoder_model
from ocr_engine.unlimited.batching import DecodeConfig, Sequence, decode
from ocr_engine.unlimited.cache import bytes_per_token
from ocr_engine.unlimited.kv_budget import GPU_MARGIN, SequenceBound, prefill_activation_bytes

EOS, PAD = 1, 2
NGRAM, NGRAM_WINDOW = 35, 1024  # the multi-page settings the engine decodes with
TINY = {"hidden": 64, "heads": 4, "intermediate": 128}


def _rows(count: int, prefix: int, vocab: int, new_tokens: int, device) -> list[Sequence]:
    import torch

    gen = torch.Generator().manual_seed(7)
    rows = []
    for _ in range(count):
        ids = torch.randint(3, vocab - 2, (1, prefix), generator=gen).to(device)
        rows.append(Sequence({"input_ids": ids, "attention_mask": torch.ones_like(ids)}, new_tokens, NGRAM_WINDOW))
    return rows


def _warm(model, rows: list[Sequence], config: DecodeConfig) -> None:
    # The first call of each batch shape pays for kernel choices and allocations (measured
    # on CPU: 8 rows took 7.5 s cold and 0.6 s warm); time the steady state.
    decode(model, [Sequence(r.inputs, 4, r.ngram_window) for r in rows], config)


def _timed(model, rows: list[Sequence], config: DecodeConfig) -> tuple[list[list[int]], float]:
    _warm(model, rows, config)
    started = time.perf_counter()
    out = decode(model, rows, config)
    return [d.tokens for d in out], time.perf_counter() - started


def run(*, device: str, layers: int, prefix: int, new_tokens: int, batches: list[int], window: int, vocab: int,
        tiny: bool, long_t: int, check_rows: int, cpu_budget_bytes: int) -> dict:
    import torch

    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    dims = TINY if tiny else {}
    model = decoder_model(layers, window, vocab, False, dtype, device, **dims)
    with torch.no_grad():  # never ends: every row decodes all its tokens
        model.get_output_embeddings().weight[EOS].zero_()
    config = DecodeConfig("static", NGRAM, EOS, PAD)
    text = model.config.get_text_config()
    per_token = bytes_per_token(text.num_hidden_layers, text.num_key_value_heads,
                                text.hidden_size // text.num_attention_heads, dtype)
    largest = max(batches)
    rows = _rows(largest, prefix, vocab, new_tokens, model.device)

    solo, solo_s = [], 0.0
    for row in rows[: max(1, min(check_rows, largest))]:
        tokens, seconds = _timed(model, [row], config)
        solo.append(tokens[0])
        solo_s += seconds
    batch1 = sum(len(t) for t in solo) / solo_s
    table, identical = [{"batch": 1, "tokens_per_s": round(batch1, 1)}], True
    for b in sorted(set(batches) - {1}):
        tokens, seconds = _timed(model, rows[:b], config)
        identical &= all(t == s for t, s in zip(tokens, solo))
        table.append({"batch": b, "tokens_per_s": round(sum(len(t) for t in tokens) / seconds, 1)})
    batched = table[-1]["tokens_per_s"]

    rswa = SequenceBound(per_token, window, 0, prefix).bytes(1)  # the reference and one window
    full = (prefix + long_t) * per_token  # a full cache at T = long_t
    if device == "cuda":
        activation = prefill_activation_bytes(model, prefix)
        total = torch.cuda.get_device_properties(model.device).total_memory
        room = int(total * (1 - GPU_MARGIN)) - torch.cuda.memory_allocated(model.device)
    else:
        activation, room = 0, cpu_budget_bytes
    report = {
        "device": device, "dtype": str(dtype).replace("torch.", ""), "layers": layers,
        "hidden": text.hidden_size, "kv_heads": text.num_key_value_heads, "vocab": vocab, "window": window,
        "prefix_tokens": prefix, "new_tokens": new_tokens, "rows": table,
        "batch": table[-1]["batch"], "batch1_tokens_per_s": round(batch1, 1), "batched_tokens_per_s": batched,
        "speedup": round(batched / batch1, 2), "identical": identical, "identical_rows_checked": len(solo),
        "bytes_per_token": per_token, "kv_bytes_per_sequence_rswa": rswa,
        "long_t": long_t, "kv_bytes_per_sequence_full_at_long_t": full,
        "activation_bytes_per_prefill": activation, "room_bytes": room,
        "largest_batch_rswa": room // (rswa + activation), "largest_batch_full": room // (full + activation),
        # and at this run's own T, where a full cache is still small: R-SWA's gain grows with T
        "largest_batch_full_at_new_tokens": room // ((prefix + new_tokens) * per_token + activation),
    }
    if device == "cuda":
        report["gpu_peak_allocated_bytes"] = torch.cuda.max_memory_allocated(model.device)
        report["largest_batch_rswa_run"] = _largest_run(model, config, report, prefix, vocab)
    return report


def _largest_run(model, config: DecodeConfig, report: dict, prefix: int, vocab: int) -> dict:
    """The largest R-SWA batch admission allows, run for a few tokens: it fits, and how fast."""
    import torch

    b = int(report["largest_batch_rswa"])
    if b <= max(r["batch"] for r in report["rows"]):
        return {"batch": b, "skipped": "not larger than the batches above"}
    tokens = 64
    rows = _rows(b, prefix, vocab, tokens, model.device)
    torch.cuda.reset_peak_memory_stats(model.device)
    try:
        out, seconds = _timed(model, rows, config)
    except torch.OutOfMemoryError as exc:
        return {"batch": b, "error": f"out of memory: {exc}"[:300]}
    return {"batch": b, "new_tokens": tokens, "tokens_per_s": round(sum(len(t) for t in out) / seconds, 1),
            "gpu_peak_allocated_bytes": torch.cuda.max_memory_allocated(model.device)}
