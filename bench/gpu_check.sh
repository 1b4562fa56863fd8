#!/usr/bin/env bash
# One prepared run on a rented H200 (issues 14, 21): first the admission budget the OCR service would
# take on this card (device_capacity with its activation reserve, measured by the engine's own code),
# then the KV cache, full vs R-SWA on the same static cache class, to T = 32,768 by the fill method,
# then the batch bench. Each step has its own timeout, so one failing still leaves the others'
# results; all of it is sized to end within 8 minutes. Results land in $OUT, at most 8 files (the
# device tool returns no more: env, admission .json/.log, kv-cache-fill .json/.log/.png, batch
# .json/.log), to be copied into docs/benchmarks by hand.
#
#   here, once:   bench/gpu_check.sh prepare   # the wheels the image lacks into .whl/ (16 MB)
#   the device:   bash bench/gpu_check.sh      # carry .whl; run's timeout_s 540
#   here, small:  GPU_CHECK_SMALL=1 bench/gpu_check.sh   # the same steps on CPU at tiny sizes
#
# The device image has its own CUDA torch (2.11.0+cu130 when last read, Python 3.12) but a
# transformers (5.17.0) without Unlimited OCR. The pinned torch cannot travel: the mirror here holds
# only the cp311 wheel (555 MB, plus its CUDA libraries), the image's Python is 3.12, and a call
# carries 64 MiB. So the bench runs on the image's torch, with the pinned transformers wheel
# (pure Python) and pydantic's installed over it; the JSON records the torch version it ran on.
set -uo pipefail
cd "$(dirname "$0")/.."

# What the image lacks (as listed in the device notes): Unlimited OCR's transformers, and the
# pydantic settings the batch bench reads. Versions are the ones this venv resolved from pyproject.
CARRIED="transformers pydantic pydantic_core pydantic-settings python-dotenv annotated-types typing-inspection
typing_extensions"
if [ "${1:-}" = prepare ]; then
    py=${PYTHON:-.venv/bin/python}
    pins=$("$py" -c 'import sys; from importlib.metadata import version as v; print(*(f"{n}=={v(n)}" for n in sys.argv[1:]))' $CARRIED)
    exec "$py" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl $pins
fi

if [ -z "${PYTHON:-}" ]; then
    if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
# The benches are kb_dev.bench.ocr* (include/), the engine is ocr_engine (here): the device runs the checkout, uninstalled.
export PYTHONPATH=$PWD/include${PYTHONPATH:+:$PYTHONPATH}
if [ "${GPU_CHECK_SMALL:-0}" = 1 ]; then
    OUT=${OUT:-bench-results/gpu-check}
    tag=cpu-small device=cpu layers=1 prefix=128 max_t=512 vocab=4096 batches=1,2
    kv_timeout=${KV_TIMEOUT:-120} batch_timeout=${BATCH_TIMEOUT:-120} admission_timeout=${ADMISSION_TIMEOUT:-120}
else
    tag=h200 device=cuda layers=12 prefix=4096 max_t=32768 vocab=129280 batches=1,8,32
    # kv: two 725M-parameter builds (16 s each on 2 cores here), fills of ~70k tokens and 5 x 34 steps
    # of ~20 ms per cache kind: about a minute expected. Worst case of all steps: ~450 s.
    # admission: one 725M-parameter build and one prefill of the longest range (~6,000 tokens): seconds.
    kv_timeout=${KV_TIMEOUT:-240} batch_timeout=${BATCH_TIMEOUT:-180} admission_timeout=${ADMISSION_TIMEOUT:-75}
fi
: "${OUT:?set OUT to the folder for results}"
mkdir -p "$OUT"
env_log="$OUT/env-$tag.txt"

{
    echo "== $(date -u +%FT%TZ) $tag, python: $PYTHON"
    command -v nvidia-smi >/dev/null && nvidia-smi
    if ! "$PYTHON" -c 'import transformers.models.unlimited_ocr, pydantic_settings' 2>/dev/null; then
        echo "== no unlimited_ocr in transformers, or no pydantic_settings: installing the carried .whl/*.whl"
        "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PYTHONPATH
    fi
    timeout 120 "$PYTHON" - <<'EOF'
import torch, transformers
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
print("transformers", transformers.__version__, transformers.__file__)
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print(p.name, f"{p.total_memory / 2**30:.1f} GiB", f"sm_{p.major}{p.minor}", "bf16", torch.cuda.is_bf16_supported())
EOF
} >"$env_log" 2>&1
cat "$env_log"

step() {  # step NAME TIMEOUT ARGS...: stdout (the JSON) and stderr (the log) into $OUT
    local name=$1 limit=$2 began=$SECONDS
    shift 2
    timeout -k 10 "$limit" "$PYTHON" -m kb_dev.bench.ocr "$@" --json \
        >"$OUT/$name-$tag.json" 2>"$OUT/$name-$tag.log"
    local rc=$?
    [ $rc = 0 ] || tail -5 "$OUT/$name-$tag.log"
    echo "== $name: rc $rc in $((SECONDS - began)) s (limit $limit s)$([ $rc = 124 ] && echo ', timed out')" \
        | tee -a "$OUT/$name-$tag.log"
}

# The production admission budget: device_capacity on this card, with its activation reserve (the peak
# of one longest-range prefill x OCR_MAX_BATCH). OCR_MODEL_DIR, when set and present, measures the
# released checkpoint through the engine's backend; otherwise the benchmark's decoder (the JSON says).
admission_model=()
[ -n "${OCR_MODEL_DIR:-}" ] && [ -d "$OCR_MODEL_DIR" ] && admission_model=(--model-dir "$OCR_MODEL_DIR")
step admission "$admission_timeout" admission --device $device --layers $layers --vocab $vocab "${admission_model[@]}"

step kv-cache-fill "$kv_timeout" kv-cache --method fill --layers $layers --prefix $prefix --max-t $max_t \
    --vocab $vocab --device $device --out "$OUT"
# batch prints its JSON on stdout; it takes --out only if its parser has one (it had none when this was written)
batch_out=()
"$PYTHON" -m kb_dev.bench.ocr batch --help 2>/dev/null | grep -q -- --out && batch_out=(--out "$OUT")
step batch "$batch_timeout" batch --device $device --layers $layers --prefix $prefix --batches $batches "${batch_out[@]}"

"$PYTHON" - "$OUT/kv-cache-fill-$tag.json" <<'EOF'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except (OSError, ValueError) as e:
    sys.exit(f"no kv-cache result: {e}")
print(f"{'T':>7} {'full MiB':>9} {'R-SWA MiB':>10} {'full ms/tok':>12} {'R-SWA ms/tok':>13}")
for x in r["rows"]:
    print(f"{x['T']:>7} {x['full_bytes'] / 2**20:>9.1f} {x['rswa_bytes'] / 2**20:>10.1f} "
          f"{x['full_ms_per_token']:>12.2f} {x['rswa_ms_per_token']:>13.2f}")
print(json.dumps(r["checks"]), json.dumps(r.get("cache_layers")), json.dumps(r.get("gpu_peak_allocated_bytes")),
      json.dumps(r["fill_seconds"]))
EOF
"$PYTHON" - "$OUT/admission-$tag.json" <<'EOF'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except (OSError, ValueError) as e:
    sys.exit(f"no admission result: {e}")
print("admission:", json.dumps({k: r.get(k) for k in ("model", "measured", "capacity_bytes", "how",
                                                      "longest_range_pages", "capacity_sequences_longest_range")}))
EOF
n=$(find "$OUT" -type f | wc -l)
echo "== $n files in $OUT$([ "$n" -gt 8 ] && echo ': over the 8 that come back')"
ls -la "$OUT"
