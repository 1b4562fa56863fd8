#!/usr/bin/env bash
# kb eval on one local stack, the scanned copies read twice: first by line geometry alone
# (OCR_LAYOUT_MODEL=none, how the engine read scans before the layout model of issue 53), then
# by the layout model (OCR_LAYOUT_MODEL=cdla, the default), through `kb ingest --reread`, which
# reads again only the pages another OCR model read (the layout model is part of PP-OCR's model
# version). Born-digital pages are read once and shared by both.
#
#   bash bench/eval_scans.sh [OUT]        # OUT: .kb/eval-out; state in $KB_STATE_DIR (.kb/eval-state)
#
# Where each document goes (keys as include/eval/qa.jsonl names them, relative to a prefix):
#   the inbox root: the Debian Reference, the corpus's born-digital PDFs, the samples, and the
#                   born-digital copies of the scan benchmark's frozen documents (scanbench/X.pdf);
#   scans/:         the corpus's image-only copies (the tuning split's `table-cell scanned` rows);
#   frozen-scans/:  the image-only copies of the scan benchmark's frozen documents
#                   (scanbench/X.scan.pdf), apart, so that no born-digital copy takes their places.
# Writes {before,after}-{root,scans,frozen-scans}.json (kb eval --json), and the run lines.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-.kb/eval-out}
export KB_STATE_DIR=${KB_STATE_DIR:-.kb/eval-state}
KB=.venv/bin/kb
mkdir -p "$OUT"

.venv/bin/python include/eval/fetch.py
.venv/bin/python include/corpus/fetch.py
.venv/bin/python include/eval/verify.py

born=(.kb/eval-docs/*.pdf .kb/corpus/born-digital include/samples)
frozen_born=$(ls .kb/eval-docs/scanbench/*.pdf | grep -v '\.scan\.pdf$')
frozen_scans=$(ls .kb/eval-docs/scanbench/*.scan.pdf)

evaluate() {  # $1: before | after
    $KB eval include/eval/qa.jsonl --mode all --json > "$OUT/$1-root.json"
    $KB eval include/eval/qa.jsonl --mode all --prefix scans/ --json > "$OUT/$1-scans.json"
    $KB eval include/eval/qa.jsonl --mode all --prefix frozen-scans/ --json > "$OUT/$1-frozen-scans.json"
}

OCR_LAYOUT_MODEL=none $KB up --no-observe
$KB ingest "${born[@]}" --wait | tee "$OUT/ingest-born.txt"
# shellcheck disable=SC2086
$KB ingest $frozen_born --prefix scanbench --wait | tee -a "$OUT/ingest-born.txt"
$KB ingest .kb/corpus/scanned --prefix scans --wait | tee "$OUT/ingest-before.txt"
# shellcheck disable=SC2086
$KB ingest $frozen_scans --prefix frozen-scans/scanbench --wait | tee -a "$OUT/ingest-before.txt"
evaluate before
$KB down

OCR_LAYOUT_MODEL=cdla $KB up --no-observe
$KB ingest .kb/corpus/scanned --prefix scans --wait --reread | tee "$OUT/ingest-after.txt"
# shellcheck disable=SC2086
$KB ingest $frozen_scans --prefix frozen-scans/scanbench --wait --reread | tee -a "$OUT/ingest-after.txt"
evaluate after
$KB down
echo "written: $OUT"
