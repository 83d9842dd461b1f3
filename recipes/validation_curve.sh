#!/usr/bin/env bash
# The validation curve of a run trained with --eval_strategy no (recipes/student_cpu.sh): every checkpoint of
# runs/NAME scored on validation as a user loads it (beam search with the folder's own decoding, every sentence once),
# on one core beside the training. Checkpoints already scored are skipped, so it can run again as the run goes on.
#
#   bash recipes/validation_curve.sh NAME [CORE]      -> runs/NAME-curve/checkpoint-N/eval_results.json, and a table
set -euo pipefail
name=${1:?usage: $0 NAME [CORE]}
core=${2:-1}
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
DATA=${DATA:-../shared/data/multi30k}
mkdir -p "runs/$name-curve"
for checkpoint in $(ls -d "runs/$name"/checkpoint-* | sort -t- -k2 -n); do
    scored="runs/$name-curve/$(basename "$checkpoint")"
    [ -f "$checkpoint/trainer_state.json" ] || continue  # still being written
    [ -f "$scored/eval_results.json" ] && continue
    OMP_NUM_THREADS=1 taskset -c "$core" "$PYTHON" average_checkpoints.py "$checkpoint" --output_dir "$scored" \
        --tokenizer_name "runs/$name" --data_dir "$DATA" --test_split '' >"$scored.log" 2>&1 ||
        { echo "scoring $checkpoint failed: see $scored.log" >&2; continue; }
done
"$PYTHON" - "runs/$name-curve" <<'PY'
import json, sys
from pathlib import Path
rows = []
for folder in Path(sys.argv[1]).glob("checkpoint-*"):
    results = folder / "eval_results.json"
    if results.is_file():
        val = json.loads(results.read_text())["scores"]["val"]
        rows.append((int(folder.name.split("-")[1]), val["bleu"], val["chrf"]))
print("| step | val BLEU | val chrF |\n|---:|---:|---:|")
for step, bleu, chrf in sorted(rows):
    print(f"| {step} | {bleu:.2f} | {chrf:.2f} |")
PY
