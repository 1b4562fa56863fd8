"""The ``unlimited`` backend: one generate call per page range on Unlimited OCR.

A range is parsed in multi-page base mode ("Multi page parsing.", no repeated
35-gram within the last 1024 tokens); a single page uses "document parsing." with a
128-token window, as the model's authors run it. The decoder's cache is the model's
own R-SWA cache (static by default), metered at every step.
"""

from __future__ import annotations

import copy
import time
from functools import cached_property
from pathlib import Path

from ocr_engine.errors import BackendUnavailable, Cancelled
from ocr_engine.schema import EMPTY, OK, REPEATED, TRUNCATED, PageResult, count_chars
from ocr_engine.settings import EngineSettings
from ocr_engine.unlimited import manifest
from ocr_engine.unlimited.budget import MULTI_PAGE_PROMPT, TokenBudget, budget_for
from ocr_engine.unlimited.cache import CacheMeter, build_cache
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
        self.last_meter: CacheMeter | None = None

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

    # --- one range ----------------------------------------------------------------------

    def parse(self, images: list, page_numbers: list[int], page_sizes: list[tuple[float, float]],
              cancel=None) -> list[PageResult]:
        """``images``: PIL images in page order; sizes in PDF points for block boxes."""
        import torch

        started = time.perf_counter()
        n = len(images)
        single = n == 1
        prompt = SINGLE_PAGE_PROMPT if single else MULTI_PAGE_PROMPT
        window = self.settings.single_page_ngram_window if single else self.settings.multi_page_ngram_window
        messages = [{"role": "user", "content": [{"type": "image", "image": im} for im in images]
                     + [{"type": "text", "text": prompt}]}]
        inputs = self.processor.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt",
            processor_kwargs={"crop_to_patches": False},
        ).to(self.device)
        if "pixel_values" in inputs:
            inputs["pixel_values"] = inputs["pixel_values"].to(self.dtype)
        prompt_len = inputs["input_ids"].shape[1]
        max_new = min(n * self.settings.max_new_tokens_per_page,
                      self.model.config.text_config.max_position_embeddings - prompt_len)
        cache = build_cache(self.model.config.get_text_config(), self.settings.cache, prompt_len + max_new)
        meter = CacheMeter(cache)
        self.last_meter = meter

        from transformers import StoppingCriteria, StoppingCriteriaList

        class _Meter(StoppingCriteria):
            def __call__(self, input_ids, scores, **kwargs):
                meter.observe()
                stop = cancel is not None and cancel.is_set()  # an abandoned request stops at the next token
                return torch.full((input_ids.shape[0],), stop, dtype=torch.bool, device=input_ids.device)

        config = copy.deepcopy(self.model.generation_config)
        config.do_sample = False
        config.max_new_tokens = max_new
        config.no_repeat_ngram_size = self.settings.multi_page_ngram
        # Read by the model's generation mixin: the n-gram ban looks back this many tokens only.
        config.no_repeat_ngram_window_size = window
        with torch.inference_mode():
            out = self.model.generate(
                **inputs, cache=cache, generation_config=config, stopping_criteria=StoppingCriteriaList([_Meter()]),
            )
        if cancel is not None and cancel.is_set():
            raise Cancelled("the request was abandoned; generation stopped")
        generated = out[0, prompt_len:].tolist()
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
            ))
        return results
