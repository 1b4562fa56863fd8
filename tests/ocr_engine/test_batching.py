"""Batched R-SWA decoding on a tiny random decoder: a batch's rows equal their batch-1 runs
token for token, each row stops on its own, and the batcher groups what it may batch."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from kb_dev.bench.ocr import main as bench_main
from kb_dev.bench.ocr_decoder import decoder_model
from ocr_engine.unlimited.batching import DecodeBatcher, DecodeConfig, Sequence, decode

WINDOW, VOCAB, EOS, PAD = 8, 256, 1, 2
CONFIG = DecodeConfig("static", 35, EOS, PAD)


@pytest.fixture(scope="module")
def model():
    m = decoder_model(2, WINDOW, VOCAB, False, torch.float32, "cpu", hidden=64, heads=4, intermediate=128)
    with torch.no_grad():  # no end token: rows run to their limits, so lengths are the test's
        m.get_output_embeddings().weight[EOS].zero_()
    return m


def row(seed: int, length: int, new_tokens: int, cancel: threading.Event | None = None) -> Sequence:
    ids = torch.randint(3, VOCAB - 1, (1, length), generator=torch.Generator().manual_seed(seed))
    return Sequence({"input_ids": ids, "attention_mask": torch.ones_like(ids)}, new_tokens, 1024, cancel)


def test_batched_rows_equal_their_batch_1_runs_past_the_window(model):
    rows = [row(seed, 40, 5 * WINDOW) for seed in range(4)]
    solo = [decode(model, [r], CONFIG)[0] for r in rows]
    batched = decode(model, rows, CONFIG)
    assert [d.tokens for d in batched] == [d.tokens for d in solo]
    assert all(len(d.tokens) == 5 * WINDOW for d in batched)
    assert {d.batch_size for d in batched} == {4} and {d.batch_size for d in solo} == {1}
    # the same cache per row in a batch as alone: the reference and one window
    assert {d.kv_peak_bytes for d in batched} == {solo[0].kv_peak_bytes}
    assert len({tuple(d.tokens) for d in batched}) == 4  # different inputs, different outputs


def test_each_row_stops_at_its_own_limit_or_cancel_flag(model):
    cancel = threading.Event()
    cancel.set()
    rows = [row(10, 40, 12), row(11, 40, 30), row(12, 40, 30, cancel)]
    out = decode(model, rows, CONFIG)
    assert [len(d.tokens) for d in out] == [12, 30, 1]  # the cancelled row stops after its first token
    assert out[0].tokens == decode(model, [row(10, 40, 30)], CONFIG)[0].tokens[:12]


def test_rows_of_different_lengths_are_never_padded_into_one_batch(model):
    with pytest.raises(ValueError, match="one length"):
        decode(model, [row(0, 40, 8), row(1, 41, 8)], CONFIG)
    batcher = DecodeBatcher(model, CONFIG, max_batch=8, gather_s=5.0)
    try:
        rows = [row(20, 40, 16), row(21, 40, 16), row(22, 33, 16)]
        everyone_in = threading.Barrier(3)  # three requests admitted before any range is ready

        def one(r):
            with batcher.expecting():
                everyone_in.wait()
                return batcher.submit(r)

        with ThreadPoolExecutor(3) as pool:
            results = list(pool.map(one, rows))
    finally:
        batcher.stop()
    # the two of one length decoded together, the other alone, each as it would alone
    assert [d.batch_size for d in results] == [2, 2, 1]
    assert [d.tokens for d in results] == [decode(model, [r], CONFIG)[0].tokens for r in rows]


def test_the_batch_benchmark_prints_its_contract(capsys):
    assert bench_main(["batch", "--json", "--device", "cpu", "--prefix", "32", "--new-tokens", "12",
                       "--batches", "1,4", "--check-rows", "4"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["batch"] == 4 and report["identical"] is True
    assert report["batch1_tokens_per_s"] > 0 and report["batched_tokens_per_s"] > 0
    assert report["largest_batch_rswa"] > report["largest_batch_full"] >= 0
