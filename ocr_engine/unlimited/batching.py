"""Batched greedy decoding: admitted page ranges decode together in one ``generate`` call.

A decode step reads every weight once whatever the batch, so on a GPU (and for small
models on a CPU) B sequences cost little more than one: the R-SWA cache is what makes
B long sequences fit, since each holds ``L_m + window`` tokens, not ``L_m + T``.

- ``decode``: one batch. Rows are padded on the left (the model's positions come from
  the attention mask, so a padded row sees the same positions as alone); the static
  R-SWA cache gets a batch dimension; each row stops at its own end token, token limit
  or cancel flag, and its output is cut there. Greedy rows equal their batch-1 runs
  (``python -m kb_dev.bench.ocr batch`` checks it token for token).
- ``DecodeBatcher``: one thread that owns the model's decoding. Callers ``submit`` a
  sequence and block; the thread takes what is queued (same n-gram window, up to
  ``max_batch``), and when requests that were admitted have not submitted yet (they are
  still rendering their pages) it waits for them a little, so admitted ranges really
  decode together.
"""

from __future__ import annotations

import copy
import threading
import time
from collections import deque
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from ocr_engine.unlimited.cache import build_cache, cache_bytes


@dataclass
class Sequence:
    """One page range, tokenised and ready for the decoder (batch dimension 1)."""

    inputs: dict[str, Any]  # the processor's output: input_ids, attention_mask, pixel_values
    max_new_tokens: int
    ngram_window: int
    cancel: threading.Event | None = None

    @property
    def length(self) -> int:
        return int(self.inputs["input_ids"].shape[1])


@dataclass
class Decoded:
    tokens: list[int]  # generated ids, cut at the row's own end (its end token included)
    device_seconds: float  # the batch's generate time over its rows
    kv_peak_bytes: int  # this row's share of the cache, at its largest
    kv_mean_bytes: int  # and averaged over the steps
    batch_size: int


@dataclass
class DecodeConfig:
    cache_kind: str  # static | dynamic (R-SWA either way)
    ngram_size: int
    eos_token_id: int
    pad_token_id: int


def _stack(sequences: list[Sequence], device) -> dict[str, Any]:
    """One batch of rows of one length: tensors concatenated on the batch dimension, the
    per-image lists joined (the model scatters image features into image tokens in row order)."""
    batch: dict[str, Any] = {}
    for name, first in sequences[0].inputs.items():
        values = [s.inputs[name] for s in sequences]
        if isinstance(first, torch.Tensor):
            batch[name] = torch.cat(values).to(device)
        elif isinstance(first, list):
            batch[name] = [item for v in values for item in v]
        else:
            batch[name] = first
    return batch


def batch_key(sequence: Sequence) -> tuple[int, int]:
    """Rows that may share a batch: the same length and the same n-gram window.

    Not padding is deliberate: with left padding, transformers' R-SWA layers read the
    padding mask at the sliding window's offset for the reference slots too, so once the
    output passes the window a padded row attends to its padding (measured: padded rows
    left their batch-1 tokens at exactly window + 1). A range's length is its page count
    (every page costs the same visual tokens in base mode), and the planner cuts ranges
    of equal page counts, so rows of one length are the common case.
    """
    return sequence.length, sequence.ngram_window


def decode(model, sequences: list[Sequence], config: DecodeConfig, on_step: Callable[[], None] | None = None) -> list[Decoded]:
    """Decode ``sequences`` as one batch; one ``Decoded`` per sequence, in order."""
    from transformers import StoppingCriteria, StoppingCriteriaList

    if len({batch_key(s) for s in sequences}) != 1:
        raise ValueError("a batch takes rows of one length and one n-gram window (see batch_key)")
    device = model.device
    batch = _stack(sequences, device)
    width = batch["input_ids"].shape[1]
    limits = torch.tensor([s.max_new_tokens for s in sequences], device=device)
    max_new = max(s.max_new_tokens for s in sequences)
    # At least a window past the reference: a static R-SWA cache sized below L_m + window
    # would give the window's slots to part of the reference.
    window = model.config.get_text_config().sliding_window or 0
    cache = build_cache(model.config.get_text_config(), config.cache_kind, width + max(max_new, window))
    samples: list[int] = []
    stopped: list[int | None] = [None] * len(sequences)  # tokens a row had when it stopped

    class _Rows(StoppingCriteria):
        # Per row: its own token limit and its own cancel flag; the end token is generate's.
        # A stopped row is filled with pad tokens until the batch ends; its output ends here.
        def __call__(self, input_ids, scores, **kwargs):
            samples.append(cache_bytes(cache))
            if on_step is not None:
                on_step()
            generated = input_ids.shape[1] - width
            done = torch.full((input_ids.shape[0],), generated, device=device) >= limits
            for i, s in enumerate(sequences):
                if s.cancel is not None and s.cancel.is_set():
                    done[i] = True
                if done[i] and stopped[i] is None:
                    stopped[i] = generated
            return done

    generation = copy.deepcopy(model.generation_config)
    generation.do_sample = False
    generation.max_new_tokens = max_new
    generation.no_repeat_ngram_size = config.ngram_size
    # Read by the model's generation mixin: the n-gram ban looks back this many tokens only.
    generation.no_repeat_ngram_window_size = sequences[0].ngram_window
    generation.eos_token_id = config.eos_token_id
    generation.pad_token_id = config.pad_token_id
    generation.disable_compile = True  # eager: a static cache would make transformers compile on CUDA
    started = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(**batch, cache=cache, generation_config=generation,
                             stopping_criteria=StoppingCriteriaList([_Rows()]))
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    rows = len(sequences)
    peak = max(samples, default=0) // rows
    mean = int(sum(samples) / len(samples) / rows) if samples else 0
    decoded = []
    for i, s in enumerate(sequences):
        tokens = out[i, width:].tolist()[: stopped[i] or s.max_new_tokens]
        if config.eos_token_id in tokens:  # rows finished early are filled with pad tokens after their end
            tokens = tokens[: tokens.index(config.eos_token_id) + 1]
        decoded.append(Decoded(tokens, round(seconds / rows, 4), peak, mean, rows))
    return decoded


@dataclass
class _Job:
    sequence: Sequence
    future: Future = field(default_factory=Future)


class DecodeBatcher:
    """The one thread that decodes; ``submit`` blocks its caller until its row is done.

    Every row's cache was reserved by admission before its request reached the engine,
    and rows of one batch are never padded, so a batch holds exactly what was reserved.
    """

    def __init__(self, model, config: DecodeConfig, *, max_batch: int, gather_s: float,
                 on_step: Callable[[], None] | None = None) -> None:
        self.model, self.config = model, config
        self.max_batch, self.gather_s = max(1, max_batch), gather_s
        self._on_step = on_step
        self._queue: deque[_Job] = deque()
        self._cond = threading.Condition()
        self._expected = 0  # requests in the engine that may still submit a sequence
        self._thread = threading.Thread(target=self._loop, name="ocr-decoder", daemon=True)
        self._stopped = False
        self._thread.start()

    @contextmanager
    def expecting(self):
        """Around a request's engine work: the batcher waits (up to ``gather_s``) for the
        sequences of requests inside this block before it starts a batch without them."""
        with self._cond:
            self._expected += 1
        try:
            yield
        finally:
            with self._cond:
                self._expected -= 1
                self._cond.notify_all()

    def submit(self, sequence: Sequence) -> Decoded:
        job = _Job(sequence)
        with self._cond:
            if self._stopped:
                raise RuntimeError("the decoder is stopped")
            self._queue.append(job)
            self._cond.notify_all()
        return job.future.result()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        self._thread.join(timeout=30)

    # --- the decoding thread ------------------------------------------------------------

    def _take(self) -> list[_Job] | None:
        with self._cond:
            while not self._queue and not self._stopped:
                self._cond.wait()
            if self._stopped and not self._queue:
                return None
            # Admitted requests still rendering their pages are worth a short wait: a step
            # costs nearly the same for one row as for several.
            deadline = time.monotonic() + self.gather_s
            while (len(self._queue) < min(self.max_batch, self._expected) and not self._stopped
                   and (left := deadline - time.monotonic()) > 0):
                self._cond.wait(left)
            key = batch_key(self._queue[0].sequence)
            batch = [job for job in self._queue if batch_key(job.sequence) == key][: self.max_batch]
            for job in batch:
                self._queue.remove(job)
            return batch

    def _loop(self) -> None:
        while True:
            batch = self._take()
            if batch is None:
                return
            try:
                results = decode(self.model, [j.sequence for j in batch], self.config, self._on_step)
                for job, result in zip(batch, results):
                    job.future.set_result(result)
            except BaseException as exc:  # every waiting caller hears of it; the thread goes on
                for job in batch:
                    if not job.future.done():
                        job.future.set_exception(exc)
