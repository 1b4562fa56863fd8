"""The admission budget a device gives: ``device_capacity`` and its activation reserve, measured.

    python -m kb_dev.bench.ocr admission --json [--device cuda --model-dir DIR]

The OCR service sizes its KV budget once, at start (``ocr_engine/unlimited/kv_budget.py``): the
card's memory less a margin, the weights, and an activation reserve (the peak of one prefill of
the longest range, times ``OCR_MAX_BATCH``). This runs that same function on the device at hand
and reports what it measured, so the budget is known the first time a device is lent, before a
service is deployed on it.

- ``--model-dir``: the released checkpoint, loaded by the engine's own backend
  (``UnlimitedBackend``); the budget is then exactly the one the service would log.
- otherwise the benchmark's decoder (``bench_decoder.decoder_model``): the released decoder's
  attention dimensions (12 layers, hidden 1280, 10 KV heads of 128, R-SWA) with dense MLPs and a
  tiny vision tower, random weights. Its weights and its prefill's activations are not the
  released model's; the JSON says which model it measured (``model``). The longest range's size
  comes from ``--visual-tokens-per-page`` and ``--prompt-tokens`` (the released processor's, as
  DEPLOY.md gives them) through the engine's ``TokenBudget``.

On a CPU ``device_capacity`` measures nothing and returns ``OCR_CPU_KV_BUDGET_BYTES``; the
report says so (``measured: false``).
"""

from __future__ import annotations

import logging
from typing import Any

from kb_dev.bench.ocr_decoder import REAL_LAYERS, decoder_model

# The released processor in base mode at 1,024 pixels: q = 1,024 / 16 / 4 = 16, q(q + 1) + 1.
DEFAULT_VISUAL_TOKENS_PER_PAGE = 273
DEFAULT_PROMPT_TOKENS = 10  # "Multi page parsing." and the chat template's few tokens (DEPLOY.md: ~10)
RELEASED_WINDOW = 128  # the released model's sliding_window


class _BudgetRecord(logging.Handler):
    """Keeps what ``device_capacity`` logs about how it reached the budget (its only report of it)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.how: dict[str, Any] | None = None

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args if isinstance(record.args, tuple) else ()
        if record.msg.startswith("KV budget") and args and isinstance(args[-1], dict):
            self.how = dict(args[-1])


def _measure(model, bound, pages: int, max_batch: int, cpu_default: int) -> dict[str, Any]:
    from ocr_engine.unlimited import kv_budget

    record = _BudgetRecord()
    logger = logging.getLogger(kv_budget.__name__)
    level = logger.level
    logger.addHandler(record)
    logger.setLevel(logging.INFO)
    try:
        capacity = kv_budget.device_capacity(model, bound, longest_pages=pages, max_batch=max_batch,
                                             configured_bytes=None, cpu_default_bytes=cpu_default)
    finally:
        logger.removeHandler(record)
        logger.setLevel(level)
    gpu = model.device.type == "cuda"
    how = record.how
    if gpu and how is None:  # the log line changed: measure the reserve's part again, and say so
        how = {"activation_per_prefill": kv_budget.prefill_activation_bytes(model, bound.reference_tokens(pages)),
               "note": "device_capacity's log line was not found; the prefill's activation was measured again"}
    return {
        "measured": gpu,
        "capacity_bytes": capacity,
        # total, weights, activation_per_prefill, activation_reserve, margin: device_capacity's own figures
        "how": how if gpu else {"cpu_kv_budget_bytes": cpu_default},
        "longest_range_pages": pages,
        "longest_range_kv_bytes": bound.bytes(pages),
        "max_batch": max_batch,
        "capacity_sequences_longest_range": bound.sequences(capacity, pages),
    }


def run(device: str, model_dir: str | None = None, layers: int = REAL_LAYERS, vocab: int = 129_280,
        window: int = RELEASED_WINDOW, visual_tokens_per_page: int = DEFAULT_VISUAL_TOKENS_PER_PAGE,
        prompt_tokens: int = DEFAULT_PROMPT_TOKENS, max_batch: int | None = None) -> dict[str, Any]:
    import torch

    from ocr_engine.settings import EngineSettings

    settings = EngineSettings(device=device, **({"max_batch": max_batch} if max_batch else {}))
    env = {"torch": torch.__version__, "device": device,
           "device_name": torch.cuda.get_device_name(0) if device == "cuda" else "cpu"}
    if model_dir:
        from ocr_engine.unlimited.backend import UnlimitedBackend

        backend = UnlimitedBackend(model_dir, settings)
        bound, pages, model = backend.bound, backend.pages_per_call, backend.model
        described = {"model": "released checkpoint", "model_dir": str(model_dir), "version": backend.model_version}
    else:
        from ocr_engine.api.limits import TokenBudget
        from ocr_engine.unlimited.cache import bytes_per_token
        from ocr_engine.unlimited.kv_budget import SequenceBound

        dtype = torch.bfloat16 if device == "cuda" else torch.float32
        model = decoder_model(layers, window, vocab, False, dtype, device)
        text = model.config.get_text_config()
        head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
        # as UnlimitedBackend.bound and .pages_per_call build them, from the assumed processor figures
        bound = SequenceBound(bytes_per_token(text.num_hidden_layers, text.num_key_value_heads, head_dim, dtype),
                              text.sliding_window, prompt_tokens, visual_tokens_per_page)
        budget = TokenBudget(min(settings.context_length, text.max_position_embeddings), visual_tokens_per_page,
                             prompt_tokens, settings.expected_tokens_per_page)
        pages = max(1, budget.max_pages())
        described = {"model": "benchmark decoder: released attention dims, dense MLPs, tiny vision tower, "
                              "random weights (not the released model's weights or activations)",
                     "layers": layers, "vocab": vocab, "window": window,
                     "assumed_visual_tokens_per_page": visual_tokens_per_page,
                     "assumed_prompt_tokens": prompt_tokens}
    report = {**env, **described, "bytes_per_token": bound.bytes_per_token,
              **_measure(model, bound, pages, settings.max_batch, settings.cpu_kv_budget_bytes)}
    return report


def table(report: dict[str, Any]) -> str:
    how = report["how"] or {}
    lines = [f"{report['device_name']} ({report['device']}), {report['model']}"]
    if not report["measured"]:
        lines.append(f"not measured on a CPU: the budget is OCR_CPU_KV_BUDGET_BYTES = {report['capacity_bytes']:,} B")
    else:
        for name in ("total", "margin", "weights", "activation_per_prefill", "activation_reserve"):
            if name in how:
                lines.append(f"  {name:<24} {how[name]:>16,} B")
    lines.append(f"  {'KV budget (capacity)':<24} {report['capacity_bytes']:>16,} B")
    lines.append(f"  longest range {report['longest_range_pages']} pages: {report['longest_range_kv_bytes']:,} B of KV; "
                 f"{report['capacity_sequences_longest_range']} fit (OCR_MAX_BATCH {report['max_batch']})")
    return "\n".join(lines)
