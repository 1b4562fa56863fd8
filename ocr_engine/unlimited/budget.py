"""How many pages one generate call can take: the token-budget planner.

Every page costs its visual tokens in the reference (prefill) part and its output
tokens in positions; the model's context (32,768 positions) bounds both, with a
reserve for output kept per page. R-SWA bounds the cache, not the positions.
"""

from __future__ import annotations

import math

from ocr_engine.api.limits import TokenBudget


def visual_tokens_base_mode(image_size: int, patch_size: int = 16, downsample_ratio: int = 4) -> int:
    """Tokens one page takes in base mode (one global view, no local tiles).

    A q x q grid of queries, a newline token closing each row, and one view separator:
    ``q * (q + 1) + 1`` with ``q = ceil(image_size / patch_size / downsample_ratio)``.
    """
    q = math.ceil(image_size // patch_size / downsample_ratio)
    return q * (q + 1) + 1


MULTI_PAGE_PROMPT = "Multi page parsing."


def budget_for(processor, text_config, context_length: int, output_tokens_per_page: int) -> TokenBudget:
    """The budget of a model folder's processor and text config: the loaded backend and a
    planner that reads only the config files (``UnlimitedBackend.limits`` before loading)
    both call this, so they cannot disagree."""
    size = processor.image_processor.size
    visual = visual_tokens_base_mode(max(size.height, size.width), processor.patch_size, processor.downsample_ratio)
    prompt = len(processor.tokenizer(MULTI_PAGE_PROMPT)["input_ids"]) + 4  # the chat template's few tokens
    context = min(context_length, text_config.max_position_embeddings)
    return TokenBudget(context, visual, prompt, output_tokens_per_page)

