"""The ``unlimited`` backend: one generate call per page range on Unlimited OCR.

A range is parsed in multi-page base mode ("Multi page parsing.", no repeated
35-gram within the last 1024 tokens); a single page uses "document parsing." with a
128-token window, as the model's authors run it. The decoder's cache is the model's
own R-SWA cache (static by default), metered at every step.

Ranges are decoded by one ``DecodeBatcher`` thread: calls from several request threads
that arrive together decode as one batch (``batching.py``); each page's result carries
its share of the device time and its sequence's KV cache, for cost accounting.

The backend is cheap to build. Its limits (token budget, KV bound) come from the folder's
processor and config files, without the weights, until the model is loaded; the weights
load on first use, once every file has matched the manifest.
"""

from __future__ import annotations

import threading
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import pymupdf

from ocr_engine.backends.interface import Backend, BackendLimits, Call
from ocr_engine.api.names import BackendName
from ocr_engine.api.errors import BackendUnavailable, Cancelled
from ocr_engine.api.pages import PageResult, PageStatus, count_chars
from ocr_engine.settings import EngineSettings
from ocr_engine.unlimited import manifest
from ocr_engine.unlimited.budget import MULTI_PAGE_PROMPT, TokenBudget, budget_for
from ocr_engine.unlimited.kv_budget import SequenceBound, device_capacity
from ocr_engine.api.text import distinct_ratio
from ocr_engine.unlimited.output import parse_blocks, split_pages, to_markdown

NAME = BackendName.UNLIMITED.value
SINGLE_PAGE_PROMPT = "document parsing."


def _device(settings: EngineSettings) -> str:
    import torch

    if settings.device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return settings.device


def _dtype(device: str):
    import torch

    return torch.bfloat16 if device == "cuda" else torch.float32


class _Reader:
    """What a folder's processor and text config say about a range: its tokens, its token
    budget and its KV bound. Planning reads one from the config files alone; the loaded
    model has its own, from the verified files."""

    def __init__(self, processor, text_config, settings: EngineSettings, dtype) -> None:
        self.processor, self.text_config, self.settings, self.dtype = processor, text_config, settings, dtype

    @cached_property
    def budget(self) -> TokenBudget:
        return budget_for(self.processor, self.text_config, self.settings.context_length,
                          self.settings.expected_tokens_per_page)

    @property
    def pages_per_call(self) -> int:
        """The pages one generate call takes (at least one, even past the context)."""
        return max(1, self.budget.max_pages())

    @cached_property
    def bound(self) -> SequenceBound:
        """The KV cache one range of p pages holds: (prompt + p x visual + window) x bytes per token."""
        from ocr_engine.unlimited.cache import bytes_per_token

        text = self.text_config
        head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
        per_token = bytes_per_token(text.num_hidden_layers, text.num_key_value_heads, head_dim, self.dtype)
        return SequenceBound(per_token, text.sliding_window, self._prompt_tokens(), self.budget.visual_tokens_per_page)

    def _prompt_tokens(self) -> int:
        # Measured on a one-page request of each prompt: what the chat template adds around
        # the image tokens, exactly (the planner's budget only estimates it).
        from PIL import Image

        blank = Image.new("RGB", (64, 64), "white")
        lengths = [self.inputs([blank], prompt)["input_ids"].shape[1] for prompt in (SINGLE_PAGE_PROMPT, MULTI_PAGE_PROMPT)]
        return max(lengths) - self.budget.visual_tokens_per_page

    def inputs(self, images: list, prompt: str):
        messages = [{"role": "user", "content": [{"type": "image", "image": im} for im in images]
                     + [{"type": "text", "text": prompt}]}]
        inputs = self.processor.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt",
            processor_kwargs={"crop_to_patches": False},
        )
        if "pixel_values" in inputs:
            inputs["pixel_values"] = inputs["pixel_values"].to(self.dtype)
        return inputs


@dataclass
class _Loaded:
    reader: _Reader
    model: Any
    batcher: Any  # batching.DecodeBatcher (imported with torch, on loading)
    model_version: str
    weights_digest: str


class UnlimitedBackend(Backend):
    name = NAME

    def __init__(self, model_dir: Path, settings: EngineSettings | None = None) -> None:
        self.settings = settings or EngineSettings()
        self.model_dir = Path(model_dir)
        self._lock = threading.Lock()  # one load, whichever engine thread asks first
        self._loaded: _Loaded | None = None

    # --- loading --------------------------------------------------------------------------

    @property
    def loaded(self) -> bool:
        return self._loaded is not None

    def load(self) -> None:
        """Verify the folder against its manifest, then load the weights (once)."""
        self._model()

    def _model(self) -> _Loaded:
        with self._lock:
            if self._loaded is None:
                self._loaded = self._load()
            return self._loaded

    def _load(self) -> _Loaded:
        # Verified before anything is loaded: a tampered or incomplete folder never reaches torch.
        model_version, weights_digest = manifest.verify(self.model_dir)
        import torch
        from transformers import AutoProcessor, UnlimitedOcrForConditionalGeneration

        from ocr_engine.unlimited.batching import DecodeBatcher, DecodeConfig

        device = _device(self.settings)
        if device == "cuda" and not torch.cuda.is_available():
            raise BackendUnavailable("OCR_DEVICE=cuda but no CUDA device is available")
        dtype = _dtype(device)
        processor = AutoProcessor.from_pretrained(self.model_dir, local_files_only=True)
        model = UnlimitedOcrForConditionalGeneration.from_pretrained(
            self.model_dir, dtype=dtype, local_files_only=True
        ).to(device).eval()
        tokenizer = processor.tokenizer
        batcher = DecodeBatcher(
            model, DecodeConfig(self.settings.cache, self.settings.multi_page_ngram, tokenizer.eos_token_id,
                                tokenizer.pad_token_id),
            max_batch=self.settings.max_batch, gather_s=self.settings.batch_gather_s)
        reader = _Reader(processor, model.config.get_text_config(), self.settings, dtype)
        return _Loaded(reader, model, batcher, model_version, weights_digest)

    @cached_property
    def _files(self) -> _Reader:
        # the config files only, as a planner reads them: no weights, no manifest check
        from transformers import AutoConfig, AutoProcessor

        processor = AutoProcessor.from_pretrained(self.model_dir, local_files_only=True)
        config = AutoConfig.from_pretrained(self.model_dir, local_files_only=True)
        return _Reader(processor, config.get_text_config(), self.settings, _dtype(_device(self.settings)))

    @property
    def _reader(self) -> _Reader:
        return self._loaded.reader if self._loaded is not None else self._files

    @property
    def model(self):
        return self._model().model

    @property
    def processor(self):
        return self._model().reader.processor

    @property
    def model_version(self) -> str:
        return self._model().model_version

    @property
    def weights_digest(self) -> str:
        return self._model().weights_digest

    def model_identity(self) -> tuple[str | None, str | None]:
        # what the manifest declares, unverified, for a planner: the load verifies it
        if self._loaded is not None:
            return self._loaded.model_version, self._loaded.weights_digest
        return manifest.declared(self.model_dir)

    # --- planning (without the weights until they are loaded) -----------------------------

    def budget(self) -> TokenBudget:
        """How many pages one generate call takes (the planner reads the same numbers)."""
        return self._reader.budget

    @property
    def visual_tokens_per_page(self) -> int:
        return self._reader.budget.visual_tokens_per_page

    @property
    def pages_per_call(self) -> int:
        return self._reader.pages_per_call

    @property
    def bound(self) -> SequenceBound:
        return self._reader.bound

    def limits(self) -> BackendLimits:
        reader = self._reader
        return BackendLimits(max_pages_per_call=reader.pages_per_call, token_budget=reader.budget,
                             kv_bound=reader.bound, max_batch=self.settings.max_batch)

    def kv_capacity(self) -> int:
        """Bytes of KV cache the device gives all admitted sequences (see kv_budget.py)."""
        return self._kv_capacity

    @cached_property
    def _kv_capacity(self) -> int:
        # measured once: on a GPU a prefill of the longest range, with the weights in
        model, s = self._model(), self.settings
        return device_capacity(model.model, model.reader.bound, longest_pages=model.reader.pages_per_call,
                               max_batch=s.max_batch, configured_bytes=s.kv_budget_bytes,
                               cpu_default_bytes=s.cpu_kv_budget_bytes)

    def expecting(self) -> AbstractContextManager[None]:
        # before the model is loaded no call can be decoding: nothing to wait for
        return self._loaded.batcher.expecting() if self._loaded is not None else nullcontext()

    # --- the engine's calls: pages cut into generate calls ---------------------------------

    def parse(self, doc: pymupdf.Document, pages: list[int], call: Call) -> list[PageResult]:
        per_call = self._model().reader.pages_per_call  # loads here: a bad folder is the request's error
        out = []
        for start in range(0, len(pages), per_call):
            call.check_cancel()
            group = pages[start : start + per_call]
            started = time.perf_counter()
            results = self._read_call(doc, group, call)
            for r in results:  # rendering included, as for ppocr
                r.seconds = round((time.perf_counter() - started) / len(group), 4)
            out.extend(results)
        return out

    def _read_call(self, doc: pymupdf.Document, pages: list[int], call: Call) -> list[PageResult]:
        from PIL import Image

        images, sizes = [], []
        for rendered in call.render(doc, pages):
            images.append(Image.fromarray(rendered.image))
            rect = doc.load_page(rendered.page - 1).rect
            sizes.append((rect.width, rect.height))
        with call.unlocked():  # decoding does not touch MuPDF: other calls render meanwhile
            try:
                return self.read_images(images, pages, sizes, cancel=call.cancel)
            except Cancelled:
                raise
            except Exception as exc:  # one failed call fails its pages, not the document
                return [PageResult.failed(n, NAME, exc) for n in pages]

    def read_images(self, images: list, page_numbers: list[int], page_sizes: list[tuple[float, float]],
                    cancel=None) -> list[PageResult]:
        """One generate call: ``images`` are PIL images in page order; sizes in PDF points for block boxes."""
        from ocr_engine.unlimited.batching import Sequence

        loaded = self._model()
        started = time.perf_counter()
        n = len(images)
        single = n == 1
        prompt = SINGLE_PAGE_PROMPT if single else MULTI_PAGE_PROMPT
        window = self.settings.single_page_ngram_window if single else self.settings.multi_page_ngram_window
        inputs = loaded.reader.inputs(images, prompt)
        prompt_len = inputs["input_ids"].shape[1]
        max_new = min(n * self.settings.max_new_tokens_per_page,
                      loaded.reader.text_config.max_position_embeddings - prompt_len)
        decoded = loaded.batcher.submit(Sequence(dict(inputs), max_new, window, cancel))
        if cancel is not None and cancel.is_set():
            raise Cancelled("the request was abandoned; generation stopped")
        generated = decoded.tokens
        tokenizer = loaded.reader.processor.tokenizer
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
            status, reason = (PageStatus.OK, None) if count_chars(markdown) else (PageStatus.EMPTY, None)
            if i >= len(pieces):
                status, reason = PageStatus.TRUNCATED, f"the output has {len(pieces)} page separator(s) for {n} pages"
            elif not ended and i == len(pieces) - 1:
                status, reason = PageStatus.TRUNCATED, f"generation stopped at {len(generated)} tokens without an end token"
            elif distinct_ratio(page_tokens, self.settings.distinct_n) < self.settings.min_distinct_ratio:
                status, reason = PageStatus.REPEATED, (f"distinct-{self.settings.distinct_n} "
                                            f"{distinct_ratio(page_tokens, self.settings.distinct_n):.2f} "
                                            f"< {self.settings.min_distinct_ratio}")
            results.append(PageResult(
                page=number, markdown=markdown, blocks=blocks, backend=NAME, status=status, reason=reason,
                chars=count_chars(markdown), model_version=loaded.model_version, weights_digest=loaded.weights_digest,
                tokens_in=loaded.reader.budget.visual_tokens_per_page, tokens_out=len(page_tokens), seconds=seconds,
                device_seconds=round(decoded.device_seconds / n, 4), kv_peak_bytes=decoded.kv_peak_bytes,
                kv_mean_bytes=decoded.kv_mean_bytes, batch_size=decoded.batch_size, width=width, height=height,
            ))
        return results
