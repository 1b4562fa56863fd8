"""The chunked fill of kb_dev.bench.ocr_decoder leaves the cache that decoding token by token leaves."""

from __future__ import annotations

import json
import re

import pytest
import torch

from kb_dev.bench.ocr_decoder import decoder_model, fill, forward, layer_class, new_cache
from ocr_engine.unlimited.cache import bytes_per_token, cache_bytes

LAYERS, HEADS, HIDDEN, WINDOW, VOCAB = 2, 4, 64, 8, 97
PREFIX, T = 12, 45  # T: several windows; chunks of 16 (> WINDOW) leave a ragged last one of 13
STATIC_LAYERS = {"full": "StaticLayer", "rswa": "UnlimitedOcrStaticReferenceSlidingWindowLayer"}


def tiny(full: bool):
    return decoder_model(LAYERS, WINDOW, VOCAB, full, torch.float32, "cpu", hidden=HIDDEN, heads=HEADS, intermediate=128)


def tokens(n: int, seed: int) -> torch.Tensor:
    return torch.randint(3, VOCAB - 2, (1, n), generator=torch.Generator().manual_seed(seed))


def one_at_a_time(model, reference, generated):
    """The reference state: the prefill, then each generated token in its own forward, as generate feeds them."""
    cache = new_cache(model, PREFIX + T + 2)
    with torch.inference_mode():
        logits = forward(model, cache, reference, 0)
        for i in range(generated.shape[1]):
            logits = forward(model, cache, generated[:, i:i + 1], PREFIX + i)
    return cache, logits


def tensors(cache) -> list[torch.Tensor]:
    """Every key and value tensor the layers expose; the R-SWA ones also hold the reference part."""
    out = []
    for layer in cache.layers:
        for name in ("keys", "values", "prefill_keys", "prefill_values"):
            if isinstance(getattr(layer, name, None), torch.Tensor):
                out.append(getattr(layer, name))
    return out


@pytest.mark.parametrize("full", [True, False], ids=["full-dynamic", "rswa-static"])
def test_a_chunked_fill_leaves_the_cache_and_logits_of_token_by_token_decoding(full):
    model = tiny(full)
    reference, generated = tokens(PREFIX, 1), tokens(T, 2)
    stepped, stepped_logits = one_at_a_time(model, reference, generated)
    filled = new_cache(model, PREFIX + T + 2)
    with torch.inference_mode():
        filled_logits = fill(model, filled, reference, generated, chunk=16)

    assert type(filled.layers[0]).__name__ == ("DynamicLayer" if full else "UnlimitedOcrStaticReferenceSlidingWindowLayer")
    assert filled.get_seq_length() == stepped.get_seq_length() == PREFIX + T
    assert cache_bytes(filled) == cache_bytes(stepped)
    a, b = tensors(filled), tensors(stepped)
    assert len(a) == len(b) >= 2 * LAYERS
    for x, y in zip(a, b):
        assert x.shape == y.shape
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(filled_logits, stepped_logits, rtol=1e-4, atol=1e-5)
    # and the next decoding step, from each cache, sees the same context
    nxt = stepped_logits.argmax(-1, keepdim=True)
    with torch.inference_mode():
        after_fill = forward(model, filled, nxt, PREFIX + T)
        after_steps = forward(model, stepped, nxt, PREFIX + T)
    torch.testing.assert_close(after_fill, after_steps, rtol=1e-4, atol=1e-5)


def test_the_fill_is_sensitive_to_what_it_was_fed():
    """Guards the comparison above: a cache filled with other tokens is not close."""
    model = tiny(False)
    a, b = new_cache(model, PREFIX + T + 2), new_cache(model, PREFIX + T + 2)
    with torch.inference_mode():
        fill(model, a, tokens(PREFIX, 1), tokens(T, 2), chunk=16)
        fill(model, b, tokens(PREFIX, 1), tokens(T, 3), chunk=16)
    assert cache_bytes(a) == cache_bytes(b)
    assert not all(torch.allclose(x, y, rtol=1e-4, atol=1e-5) for x, y in zip(tensors(a), tensors(b)))


def test_rswa_bytes_stop_at_the_reference_plus_window_while_the_full_cache_grows_per_token():
    per_token = bytes_per_token(LAYERS, HEADS, HIDDEN // HEADS, torch.float32)
    t1, t2 = 2 * WINDOW + 3, 5 * WINDOW
    sizes = {}
    for full in (True, False):
        model = tiny(full)
        for t in (t1, t2):
            cache = new_cache(model, PREFIX + t + 2)
            with torch.inference_mode():
                fill(model, cache, tokens(PREFIX, 1), tokens(t, 2), chunk=16)
            sizes[full, t] = cache_bytes(cache)
    assert sizes[False, t1] == sizes[False, t2] == (PREFIX + WINDOW) * per_token
    assert sizes[True, t2] - sizes[True, t1] == (t2 - t1) * per_token
    assert sizes[True, t1] == (PREFIX + t1) * per_token


def test_the_fill_method_of_the_kv_cache_bench_reports_each_checkpoint(tmp_path, capsys):
    from kb_dev.bench.ocr import main

    assert main(["kv-cache", "--method", "fill", "--layers", "1", "--prefix", "32", "--window", "16", "--max-t", "100",
                 "--checkpoints", "16,64,500", "--vocab", "64", "--device", "cpu", "--json", "--out", str(tmp_path)]) == 0
    report = json.loads(capsys.readouterr().out)
    per_token = report["bytes_per_token_theoretical"]
    assert [r["T"] for r in report["rows"]] == [16, 64, 100]  # 500 capped to --max-t
    # both sides on the same (static) cache class; the full one is allocated for L_m + T + the
    # 2 warm-up and 32 timed steps
    assert report["cache_layers"] == STATIC_LAYERS
    assert [r["full_bytes"] for r in report["rows"]] == [(32 + t + 2 + 32) * per_token for t in (16, 64, 100)]
    assert {r["rswa_bytes"] for r in report["rows"]} == {(32 + 16) * per_token}
    assert all(r["full_ms_per_token"] > 0 and r["rswa_ms_per_token"] > 0 for r in report["rows"])
    assert report["checks"]["full_bytes_grow_per_token_of_T"] and report["checks"]["rswa_bytes_flat_after_window"]
    assert (tmp_path / "kv-cache-fill.png").stat().st_size > 0


def test_the_generate_method_compares_both_on_a_static_cache_and_prints_only_what_it_measured(tmp_path, capsys):
    from kb_dev.bench.ocr import main

    assert main(["kv-cache", "--layers", "1", "--prefix", "32", "--window", "16", "--max-t", "64", "--vocab", "64",
                 "--device", "cpu", "--json", "--out", str(tmp_path)]) == 0
    report = json.loads(capsys.readouterr().out)
    per_token = report["bytes_per_token_theoretical"]
    assert report["cache_layers"] == STATIC_LAYERS
    assert [r["T"] for r in report["rows"]] == [16, 32, 64]
    # a static full cache is allocated for all L_m + max T + 1 tokens at its first step
    assert {r["full_bytes"] for r in report["rows"]} == {(32 + 64 + 1) * per_token}
    assert {r["rswa_bytes"] for r in report["rows"]} == {(32 + 16) * per_token}
    assert all(r["full_ms_per_token"] > 0 and r["rswa_ms_per_token"] > 0 for r in report["rows"])
    # nothing worked back from the deployment guide's figures (47.00 GB / 1.77 GB)
    assert "scenario" not in report
    assert not {"47.0", "1.77"} & set(re.findall(r"\d+\.\d+", json.dumps(report)))


def test_a_full_static_cache_decodes_as_the_dynamic_one():
    """What makes the same-class comparison fair: the static full cache the benchmark gives
    full attention computes what the engine's dynamic one does."""
    model = tiny(True)
    reference, generated = tokens(PREFIX, 1), tokens(T, 2)
    logits = {}
    for kind in ("dynamic", "static"):
        cache = new_cache(model, PREFIX + T + 4, kind)
        with torch.inference_mode():
            filled = fill(model, cache, reference, generated, chunk=16)
            logits[kind] = (filled, forward(model, cache, filled.argmax(-1, keepdim=True), PREFIX + T))
        assert layer_class(cache) == ("DynamicLayer" if kind == "dynamic" else "StaticLayer")
    for a, b in zip(logits["dynamic"], logits["static"]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
