"""How much KV cache one page range needs, and how much the device can give all of them.

A range of ``p`` pages decodes with the R-SWA cache holding its reference tokens (the
prompt and ``p`` x the visual tokens of a page) plus the last ``window`` generated
tokens, whatever the output's length: ``(prompt + p * visual + window) x bytes per
token``. The static cache allocates exactly that at the first step, so a bound is what a
sequence really holds, not an estimate.

The capacity is the device's: on a GPU its memory less the weights and an activation
reserve measured at start (the peak of one longest-range prefill, times the rows that
may prefill together); on a CPU a setting. The OCR service admits ranges against it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ocr_engine.api.errors import BackendUnavailable

log = logging.getLogger(__name__)
# Headroom on a GPU for what the measurement cannot see (allocator fragmentation, the
# CUDA context's own workspaces): a fraction of the device's memory.
GPU_MARGIN = 0.05


@dataclass(frozen=True)
class SequenceBound:
    bytes_per_token: int  # keys and values of one token across the decoder's layers
    window: int  # generated tokens R-SWA keeps
    prompt_tokens: int  # the chat template and prompt around the images (measured)
    visual_tokens_per_page: int

    def reference_tokens(self, pages: int) -> int:
        return self.prompt_tokens + pages * self.visual_tokens_per_page

    def tokens(self, pages: int) -> int:
        return self.reference_tokens(pages) + self.window

    def bytes(self, pages: int) -> int:
        """The cache of one sequence of ``pages`` pages; 0 pages need none."""
        return self.tokens(pages) * self.bytes_per_token if pages > 0 else 0

    def max_pages(self, capacity: int) -> int:
        """The most pages one sequence may have and still fit in ``capacity`` bytes."""
        room = capacity // self.bytes_per_token - self.prompt_tokens - self.window
        return max(0, room // self.visual_tokens_per_page) if self.visual_tokens_per_page else 0

    def sequences(self, capacity: int, pages: int) -> int:
        """How many sequences of ``pages`` pages fit in ``capacity`` bytes."""
        return capacity // self.bytes(pages) if pages > 0 else 0


def device_capacity(model, bound: SequenceBound, *, longest_pages: int, max_batch: int,
                    configured_bytes: int | None, cpu_default_bytes: int) -> int:
    """Bytes of KV cache for all admitted sequences.

    A configured number wins everywhere (a GPU shared with something else); otherwise a
    GPU's is measured (and logged, with how) and a CPU gets ``cpu_default_bytes``.
    """
    import torch

    if configured_bytes is not None:
        return configured_bytes
    if model.device.type != "cuda":
        return cpu_default_bytes
    total = torch.cuda.get_device_properties(model.device).total_memory
    weights = torch.cuda.memory_allocated(model.device)
    activation = prefill_activation_bytes(model, bound.reference_tokens(longest_pages))
    reserve = activation * max_batch
    capacity = int(total * (1 - GPU_MARGIN)) - weights - reserve
    how = {"total": total, "weights": weights, "activation_per_prefill": activation,
           "activation_reserve": reserve, "margin": int(total * GPU_MARGIN)}
    if capacity < bound.bytes(longest_pages):
        raise BackendUnavailable(
            f"the GPU cannot hold one {longest_pages}-page sequence beside the weights and an activation reserve "
            f"for {max_batch} rows ({how}); lower OCR_MAX_BATCH or set OCR_KV_BUDGET_BYTES")
    log.info("KV budget %.2f GB: %s", capacity / 1e9, how)
    return capacity


def prefill_activation_bytes(model, tokens: int) -> int:
    """Peak memory of one prefill of ``tokens`` tokens beyond the weights and its own cache."""
    import torch

    from ocr_engine.unlimited.cache import build_cache, cache_bytes

    device = model.device
    vocab = model.config.get_text_config().vocab_size
    ids = torch.randint(3, vocab - 1, (1, tokens), device=device)
    cache = build_cache(model.config.get_text_config(), "static", tokens + 1)
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    with torch.inference_mode():
        model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=1)
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device) - before - cache_bytes(cache)
    del cache
    torch.cuda.empty_cache()
    return max(0, peak)
