"""The ``unlimited`` backend: one generate call per page range on Unlimited OCR.

A range is parsed in multi-page base mode ("Multi page parsing.", no repeated
35-gram within the last 1024 tokens); a single page uses "document parsing." with a
128-token window, as the model's authors run it. The decoder's cache is the model's
own R-SWA cache (static by default), metered at every step.

Ranges are decoded by one ``DecodeBatcher`` thread: calls from several request threads
that arrive together decode as one batch (``batching.py``); each page's result carries
its share of the device time and its sequence's KV cache, for cost accounting.
"""

from __future__ import annotations

import time
from functools import cached_property
from pathlib import Path

from ocr_engine.errors import BackendUnavailable, Cancelled
from ocr_engine.schema import EMPTY, OK, REPEATED, TRUNCATED, PageResult, count_chars
from ocr_engine.settings import EngineSettings
from ocr_engine.unlimited import manifest
from ocr_engine.unlimited.budget import MULTI_PAGE_PROMPT, TokenBudget, budget_for
from ocr_engine.unlimited.batching import DecodeBatcher, DecodeConfig, Sequence
from ocr_engine.unlimited.cache import bytes_per_token
from ocr_engine.unlimited.kv_budget import SequenceBound, device_capacity
from ocr_engine.unlimited.output import distinct_ratio, parse_blocks, split_pages, to_markdown

NAME = "unlimited"
SINGLE_PAGE_PROMPT = "document parsing."


class UnlimitedBackend:
    name = NAME

    def __init__(self, model_dir: Path, settings: EngineSettings | None = None) -> None:
        self.settings = settings or EngineSettings()
        self.model_dir = Path(model_dir)
        # Verified before anything is loaded: a tampered or incomplete folder never reaches torch.
        self.model_version, self.weights_digest = manifest.verify(self.model_dir)
        import torch
        from transformers import AutoProcessor, UnlimitedOcrForConditionalGeneration

        device = self.settings.device
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if device == "cuda" and not torch.cuda.is_available():
            raise BackendUnavailable("OCR_DEVICE=cuda but no CUDA device is available")
        self.device = device
        self.dtype = torch.bfloat16 if device == "cuda" else torch.float32
        self.processor = AutoProcessor.from_pretrained(self.model_dir, local_files_only=True)
        self.model = UnlimitedOcrForConditionalGeneration.from_pretrained(
            self.model_dir, dtype=self.dtype, local_files_only=True
        ).to(device).eval()
        tokenizer = self.processor.tokenizer
        self.batcher = DecodeBatcher(
            self.model, DecodeConfig(self.settings.cache, self.settings.multi_page_ngram, tokenizer.eos_token_id,
                                     tokenizer.pad_token_id),
            max_batch=self.settings.max_batch, gather_s=self.settings.batch_gather_s)

    # --- planning ---------------------------------------------------------------------

    @cached_property
    def _budget(self) -> TokenBudget:
        return budget_for(self.processor, self.model.config.text_config, self.settings.context_length,
                          self.settings.expected_tokens_per_page)

    def budget(self) -> TokenBudget:
        """How many pages one generate call takes (the planner reads the same numbers)."""
        return self._budget

    @property
    def visual_tokens_per_page(self) -> int:
        return self._budget.visual_tokens_per_page

    @property
    def pages_per_call(self) -> int:
        """The pages one generate call takes (at least one, even past the context)."""
        return max(1, self._budget.max_pages())

    @cached_property
    def bound(self) -> SequenceBound:
        """The KV cache one range of p pages holds: (prompt + p x visual + window) x bytes per token."""
        text = self.model.config.get_text_config()
        head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
        per_token = bytes_per_token(text.num_hidden_layers, text.num_key_value_heads, head_dim, self.dtype)
        return SequenceBound(per_token, text.sliding_window, self._prompt_tokens(), self.visual_tokens_per_page)

    def _prompt_tokens(self) -> int:
        # Measured on a one-page request of each prompt: what the chat template adds around
        # the image tokens, exactly (the planner's budget only estimates it).
        from PIL import Image

        blank = Image.new("RGB", (64, 64), "white")
        lengths = [self._inputs([blank], prompt)["input_ids"].shape[1] for prompt in (SINGLE_PAGE_PROMPT, MULTI_PAGE_PROMPT)]
        return max(lengths) - self.visual_tokens_per_page

    @cached_property
    def kv_capacity(self) -> int:
        """Bytes of KV cache the device gives all admitted sequences (see kv_budget.py)."""
        s = self.settings
        return device_capacity(self.model, self.bound, longest_pages=self.pages_per_call, max_batch=s.max_batch,
                               configured_bytes=s.kv_budget_bytes, cpu_default_bytes=s.cpu_kv_budget_bytes)

    def _inputs(self, images: list, prompt: str):
        messages = [{"role": "user", "content": [{"type": "image", "image": im} for im in images]
                     + [{"type": "text", "text": prompt}]}]
        inputs = self.processor.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt",
            processor_kwargs={"crop_to_patches": False},
        )
        if "pixel_values" in inputs:
            inputs["pixel_values"] = inputs["pixel_values"].to(self.dtype)
        return inputs

    # --- one range ----------------------------------------------------------------------

    def parse(self, images: list, page_numbers: list[int], page_sizes: list[tuple[float, float]],
              cancel=None) -> list[PageResult]:
        """``images``: PIL images in page order; sizes in PDF points for block boxes."""
        started = time.perf_counter()
        n = len(images)
        single = n == 1
        prompt = SINGLE_PAGE_PROMPT if single else MULTI_PAGE_PROMPT
        window = self.settings.single_page_ngram_window if single else self.settings.multi_page_ngram_window
        inputs = self._inputs(images, prompt)
        prompt_len = inputs["input_ids"].shape[1]
        max_new = min(n * self.settings.max_new_tokens_per_page,
                      self.model.config.text_config.max_position_embeddings - prompt_len)
        decoded = self.batcher.submit(Sequence(dict(inputs), max_new, window, cancel))
        if cancel is not None and cancel.is_set():
            raise Cancelled("the request was abandoned; generation stopped")
        generated = decoded.tokens
        tokenizer = self.processor.tokenizer
        ended = bool(generated) and generated[-1] == tokenizer.eos_token_id
        body = [t for t in generated if t not in (tokenizer.eos_token_id, tokenizer.pad_token_id)]
        text = tokenizer.decode(body, skip_special_tokens=False)
        for special in (tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token):
            if special:
                text = text.replace(special, "")
        pieces = split_pages(text, n)
        seconds = round((time.perf_counter() - started) / n, 4)

        results = []
        for i, (number, (width, height)) in enumerate(zip(page_numbers, page_sizes)):
            piece = pieces[i] if i < len(pieces) else ""
            blocks = parse_blocks(piece, width, height)
            markdown = to_markdown(blocks)
            page_tokens = tokenizer(piece, add_special_tokens=False)["input_ids"] if piece else []
            status, reason = (OK, None) if count_chars(markdown) else (EMPTY, None)
            if i >= len(pieces):
                status, reason = TRUNCATED, f"the output has {len(pieces)} page separator(s) for {n} pages"
            elif not ended and i == len(pieces) - 1:
                status, reason = TRUNCATED, f"generation stopped at {len(generated)} tokens without an end token"
            elif distinct_ratio(page_tokens, self.settings.distinct_n) < self.settings.min_distinct_ratio:
                status, reason = REPEATED, (f"distinct-{self.settings.distinct_n} "
                                            f"{distinct_ratio(page_tokens, self.settings.distinct_n):.2f} "
                                            f"< {self.settings.min_distinct_ratio}")
            results.append(PageResult(
                page=number, markdown=markdown, blocks=blocks, backend=NAME, status=status, reason=reason,
                chars=count_chars(markdown), model_version=self.model_version, weights_digest=self.weights_digest,
                tokens_in=self.visual_tokens_per_page, tokens_out=len(page_tokens), seconds=seconds,
                device_seconds=round(decoded.device_seconds / n, 4), kv_peak_bytes=decoded.kv_peak_bytes,
                kv_mean_bytes=decoded.kv_mean_bytes, batch_size=decoded.batch_size, width=width, height=height,
            ))
        return results
