"""Benchmarks of the OCR engine; each prints numbers measured in one run.

    python -m kb_dev.bench.ocr kv-cache --json [--layers 2 --max-t 4096 --prefix 2048]
    python -m kb_dev.bench.ocr kv-cache --method fill --json [--max-t 32768 --prefix 4096 --checkpoints 128,2048]
    python -m kb_dev.bench.ocr ocr-accuracy [--pages 12]
    python -m kb_dev.bench.ocr batch --json [--device cuda --layers 12 --prefix 4096 --batches 1,8,32]
    python -m kb_dev.bench.ocr admission --json [--device cuda --model-dir DIR]

``kv-cache``: the real decoder's dimensions (hidden 1280, 10 KV heads of 128) with
random weights, a prefix of L_m reference tokens, then T generated tokens, once with
full attention and once with R-SWA, both on the same cache class (static: transformers'
``StaticCache`` with a full-attention layer sized for L_m + T, against the model's static
R-SWA layer), after the same warm-up. Bytes are the summed cache tensors, read at every
step (a static full cache is allocated whole at the first step); ms per token is the mean
step time just before each T. On CPU fewer layers and fp32 are used. Everything it prints
is measured in the run; the deployment guide's 47.00 GB / 1.77 GB are not reproduced here
(docs/DEPLOY.md says what they are).
``--method fill`` reaches each T by a chunked fill instead, each T with a static cache of
its own (include/kb_dev/bench/ocr_decoder.py).
``batch``: batched R-SWA decoding against batch 1, and the largest batches admission
allows for R-SWA and a full cache (include/kb_dev/bench/ocr_batch.py).
``admission``: the KV budget the OCR service would admit against on this device,
``device_capacity`` with its activation reserve, measured (include/kb_dev/bench/ocr_admission.py).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from kb_dev.bench.ocr_decoder import (
    BENCH_CACHE_KIND,
    REAL_BYTES_PER_TOKEN,
    REAL_HEAD_DIM,
    REAL_KV_HEADS,
    REAL_LAYERS,
    decoder_model,
    layer_class,
    new_cache,
)


def _run(model, prefix: int, max_t: int, checkpoints: list[int], device):
    """``generate`` of ``max_t`` tokens after ``prefix`` on a ``BENCH_CACHE_KIND`` cache for all of
    them; per checkpoint T the cache's bytes and the mean step time just before T, and the
    cache layers' class."""
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList

    from ocr_engine.unlimited.cache import cache_bytes

    cache = new_cache(model, prefix + max_t + 1, BENCH_CACHE_KIND)
    stamps: list[float] = []
    sizes: list[int] = []

    class Probe(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            if device == "cuda":
                torch.cuda.synchronize()
            stamps.append(time.perf_counter())
            sizes.append(cache_bytes(cache))
            return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(3, model.config.text_config.vocab_size - 2, (1, prefix), generator=gen).to(device)
    with torch.inference_mode():
        model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), cache=cache, max_new_tokens=max_t,
                       min_new_tokens=max_t, do_sample=False, stopping_criteria=StoppingCriteriaList([Probe()]),
                       disable_compile=True)  # eager: the static cache would trigger torch.compile on CUDA
    # stamps[i] is taken after token i+1; a step's time is the gap between stamps.
    rows = {}
    for t in checkpoints:
        lo = max(1, t - 32)
        steps = [stamps[i] - stamps[i - 1] for i in range(lo, t)]
        rows[t] = {"bytes": sizes[t - 1], "ms_per_token": round(1000 * sum(steps) / len(steps), 3)}
    return rows, layer_class(cache)


def kv_cache(layers: int, prefix: int, window: int, max_t: int, vocab: int, device: str, out_dir: Path) -> dict:
    import torch

    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    checkpoints = sorted({t for t in (window, 2 * window, 4 * window, max_t // 4, max_t // 2, max_t) if window <= t <= max_t})
    results, gpu_peak, layers_built = {}, {}, {}
    for name, full in (("full", True), ("rswa", False)):
        model = decoder_model(layers, window, vocab, full, dtype, device)
        _run(model, min(prefix, 256), 2 * window, [window], device)  # the same warm-up on both sides
        if device == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        results[name], layers_built[name] = _run(model, prefix, max_t, checkpoints, device)
        if device == "cuda":  # everything on the GPU at its peak: weights, activations and cache
            gpu_peak[name] = torch.cuda.max_memory_allocated()
        del model
    element = torch.tensor([], dtype=dtype).element_size()
    per_token = layers * REAL_KV_HEADS * REAL_HEAD_DIM * 2 * element
    rows = [{"T": t, "full_bytes": results["full"][t]["bytes"], "rswa_bytes": results["rswa"][t]["bytes"],
             "full_ms_per_token": results["full"][t]["ms_per_token"],
             "rswa_ms_per_token": results["rswa"][t]["ms_per_token"]} for t in checkpoints]
    # The static full cache is allocated for L_m + max_t + 1 tokens at its first step.
    measured_per_token = rows[-1]["full_bytes"] / (prefix + max_t + 1)
    bound = per_token * (prefix + window)
    last = rows[-1]
    at_window = next(r for r in rows if r["T"] == window)
    report = {
        "device": device, "dtype": str(dtype).replace("torch.", ""), "layers": layers,
        "kv_heads": REAL_KV_HEADS, "head_dim": REAL_HEAD_DIM, "vocab": vocab,
        "bytes_per_token": round(measured_per_token, 1),
        "bytes_per_token_theoretical": per_token,
        "real_bytes_per_token": REAL_BYTES_PER_TOKEN,
        "prefix_tokens": prefix, "window": window, "cache_layers": layers_built, "rows": rows,
        **({"gpu_peak_allocated_bytes": gpu_peak} if gpu_peak else {}),
        "checks": {
            "rswa_bytes_flat_after_window": len({r["rswa_bytes"] for r in rows if r["T"] >= window}) == 1,
            "rswa_bytes_vs_bound": round(last["rswa_bytes"] / bound, 5),
            "rswa_ms_ratio_largest_T_over_window": round(last["rswa_ms_per_token"] / at_window["rswa_ms_per_token"], 3),
            "full_ms_ratio_largest_T_over_window": round(last["full_ms_per_token"] / at_window["full_ms_per_token"], 3),
        },
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    report["plot"] = str(_plot(rows, window, out_dir / "kv-cache.png", report))
    return report


def _plot(rows: list[dict], window: int, path: Path, report: dict) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ts = [r["T"] for r in rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    a.plot(ts, [r["full_bytes"] / 2**20 for r in rows], "o-", label="full attention")
    a.plot(ts, [r["rswa_bytes"] / 2**20 for r in rows], "s-", label=f"R-SWA (window {window})")
    a.set_xlabel("generated tokens T")
    a.set_ylabel("KV cache (MiB)")
    a.set_xscale("log", base=2)
    a.legend()
    b.plot(ts, [r["full_ms_per_token"] for r in rows], "o-", label="full attention")
    b.plot(ts, [r["rswa_ms_per_token"] for r in rows], "s-", label="R-SWA")
    b.set_xlabel("generated tokens T")
    b.set_ylabel("ms per decoded token")
    b.set_xscale("log", base=2)
    b.legend()
    fig.suptitle(f"{report['layers']} layers x {report['kv_heads']} KV heads x {report['head_dim']}, "
                 f"{report['dtype']} on {report['device']}, prefix L_m={report['prefix_tokens']}, "
                 f"both on a {BENCH_CACHE_KIND} cache")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kb_dev.bench.ocr")
    sub = parser.add_subparsers(dest="bench", required=True)
    kv = sub.add_parser("kv-cache")
    kv.add_argument("--layers", type=int, default=None, help="default: 12 on CUDA, 2 on CPU")
    kv.add_argument("--prefix", type=int, default=2048)
    kv.add_argument("--window", type=int, default=128)
    kv.add_argument("--max-t", type=int, default=4096)
    kv.add_argument("--vocab", type=int, default=4096, help="small: the LM head is the same for both caches")
    kv.add_argument("--device", default="auto")
    kv.add_argument("--out", type=Path, default=Path("bench-results"))
    kv.add_argument("--json", action="store_true")
    kv.add_argument("--method", choices=("generate", "fill"), default="generate",
                    help="fill: a fresh fill to each T, then timed steps (include/kb_dev/bench/ocr_decoder.py)")
    kv.add_argument("--checkpoints", default=None, help="fill only: T values, comma list, capped to --max-t "
                    "(default 128,512,2048,8192,32768)")
    acc = sub.add_parser("ocr-accuracy")
    acc.add_argument("--pages", type=int, default=12, help="pages per language")
    acc.add_argument("--dpi", type=int, default=150)
    acc.add_argument("--json", action="store_true")
    bat = sub.add_parser("batch")
    bat.add_argument("--device", default="auto")
    bat.add_argument("--layers", type=int, default=None, help="default: 12 on CUDA, 2 on CPU")
    bat.add_argument("--prefix", type=int, default=None, help="reference tokens a row; default 4096 on CUDA, 256 on CPU")
    bat.add_argument("--new-tokens", type=int, default=None, help="default 256 on CUDA, 48 on CPU")
    bat.add_argument("--batches", default=None, help="comma list; default 1,8,32 on CUDA, 1,8 on CPU")
    bat.add_argument("--window", type=int, default=None, help="default 128 (the released model's); 16 on CPU")
    bat.add_argument("--vocab", type=int, default=None, help="default 129280 on CUDA, 512 on CPU")
    bat.add_argument("--long-t", type=int, default=32768, help="T for the full cache's largest batch")
    bat.add_argument("--check-rows", type=int, default=4, help="rows whose batch-1 run is compared token for token")
    bat.add_argument("--real-dims", action="store_true", help="on CPU too: hidden 1280, 10 KV heads of 128")
    bat.add_argument("--cpu-budget-bytes", type=int, default=None, help="default: the engine's cpu_kv_budget_bytes")
    bat.add_argument("--json", action="store_true")
    adm = sub.add_parser("admission", help="device_capacity and its activation reserve on this device")
    adm.add_argument("--device", default="auto")
    adm.add_argument("--model-dir", default=None, help="the released checkpoint (else the benchmark's decoder)")
    adm.add_argument("--layers", type=int, default=None, help="benchmark decoder: default 12 on CUDA, 1 on CPU")
    adm.add_argument("--vocab", type=int, default=None, help="benchmark decoder: default 129280 on CUDA, 4096 on CPU")
    adm.add_argument("--visual-tokens-per-page", type=int, default=None)
    adm.add_argument("--prompt-tokens", type=int, default=None)
    adm.add_argument("--max-batch", type=int, default=None, help="default: OCR_MAX_BATCH")
    adm.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    if args.bench == "admission":
        import torch

        from kb_dev.bench import ocr_admission as admission

        device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
        gpu = device == "cuda"
        report = admission.run(
            device, args.model_dir, layers=args.layers or (REAL_LAYERS if gpu else 1),
            vocab=args.vocab or (129_280 if gpu else 4096),
            visual_tokens_per_page=args.visual_tokens_per_page or admission.DEFAULT_VISUAL_TOKENS_PER_PAGE,
            prompt_tokens=args.prompt_tokens or admission.DEFAULT_PROMPT_TOKENS, max_batch=args.max_batch)
        print(json.dumps(report, indent=2) if args.json else admission.table(report))
        return 0

    if args.bench == "batch":
        import torch

        from kb_dev.bench.ocr_batch import run as batch
        from ocr_engine.settings import EngineSettings

        device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
        gpu = device == "cuda"
        batches = [int(b) for b in (args.batches or ("1,8,32" if gpu else "1,8")).split(",")]
        report = batch(device=device, layers=args.layers or (REAL_LAYERS if gpu else 2),
                       prefix=args.prefix or (4096 if gpu else 256), new_tokens=args.new_tokens or (256 if gpu else 48),
                       batches=sorted({1, *batches}), window=args.window or (128 if gpu or args.real_dims else 16),
                       vocab=args.vocab or (129_280 if gpu else 512), tiny=not (gpu or args.real_dims),
                       long_t=args.long_t, check_rows=args.check_rows,
                       cpu_budget_bytes=args.cpu_budget_bytes or EngineSettings().cpu_kv_budget_bytes)
        if args.json:
            print(json.dumps(report, indent=2))
        else:
            for r in report["rows"]:
                print(f"batch {r['batch']:>4}: {r['tokens_per_s']:>9.1f} tokens/s")
            print({k: report[k] for k in ("speedup", "identical", "largest_batch_rswa", "largest_batch_full")})
        return 0
    if args.bench == "kv-cache":
        import torch

        device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
        layers = args.layers or (REAL_LAYERS if device == "cuda" else 2)
        if args.method == "fill":
            from kb_dev.bench.ocr_decoder import checkpoints_for, kv_cache_fill

            report = kv_cache_fill(layers, args.prefix, args.window, checkpoints_for(args.max_t, args.checkpoints),
                                   args.vocab, device)
            args.out.mkdir(parents=True, exist_ok=True)
            report["plot"] = str(_plot(report["rows"], args.window, args.out / "kv-cache-fill.png", report))
        else:
            report = kv_cache(layers, args.prefix, args.window, args.max_t, args.vocab, device, args.out)
        if args.json:
            print(json.dumps(report, indent=2))
        else:
            print(f"{'T':>7} {'full MiB':>9} {'R-SWA MiB':>10} {'full ms/tok':>12} {'R-SWA ms/tok':>13}")
            for r in report["rows"]:
                print(f"{r['T']:>7} {r['full_bytes'] / 2**20:>9.1f} {r['rswa_bytes'] / 2**20:>10.1f} "
                      f"{r['full_ms_per_token']:>12.2f} {r['rswa_ms_per_token']:>13.2f}")
            print(json.dumps(report["cache_layers"]), json.dumps(report["checks"]), report["plot"], sep="\n")
        return 0
    from kb_dev.bench.ocr_accuracy import run as accuracy

    report = accuracy(pages_per_language=args.pages, dpi=args.dpi)
    print(json.dumps(report, indent=2, ensure_ascii=False) if args.json else report["table"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
