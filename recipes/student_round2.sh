#!/usr/bin/env bash
# A second round of distillation on CPU cores: a student that beats every teacher translates the teachers' 174,000
# English sources itself (CTranslate2, beam search with its saved decoding), its looping outputs are dropped, and a
# student starts from it (fine-tune) on task 1 and those translations. Each step is resumable: run the same command
# again and a finished step is skipped, a translation goes on from its last chunk, training from its last checkpoint.
#
#   bash recipes/student_round2.sh TEACHER NAME [CORE]     e.g. bash recipes/student_round2.sh runs/s5-avg-6500 r2 1
#
# Writes runs/round2/<teacher>.{en,de} (the translations), runs/round2/<teacher>-clean.{en,de} (without loops),
# runs/NAME/checkpoint-* and runs/NAME.log; choose afterwards with average_checkpoints.py on validation. One thread,
# pinned to CORE, so that it shares a two-core machine with a run on the other core. Environment: DISTILL, DATA,
# RUNS (instead of runs/), SAVE_STEPS, LEARNING_RATE, WARMUP_STEPS, EXTRA_FLAGS (appended to train.py's flags).
set -euo pipefail
teacher=${1:?usage: $0 TEACHER NAME [CORE]}
name=${2:?usage: $0 TEACHER NAME [CORE]}
core=${3:-1}
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
DATA=${DATA:-../shared/data/multi30k}
DISTILL=${DISTILL:-../shared/data/multi30k-distill}
RUNS=${RUNS:-runs}
translations="$RUNS/round2/$(basename "$teacher")"
mkdir -p "$RUNS/round2"
export OMP_NUM_THREADS=1

if [ ! -f "$translations.de" ] || [ "$(wc -l <"$translations.de")" -lt "$(wc -l <"$DISTILL/teacher-t11.en")" ]; then
    taskset -c "$core" "$PYTHON" translate_corpus.py --model "$teacher" --input "$DISTILL/teacher-t11.en" \
        --output "$translations" --source_lang en --target_lang de --backend ctranslate2 --threads 1
fi

# A translation that loops ("Schnee Schnee Schnee ...") teaches the loop: such pairs are left out (`data.is_loop`).
"$PYTHON" -c "import sys; from transformer_en_de.data import drop_loops
kept, read = drop_loops(sys.argv[1]); print(f'{sys.argv[1]}-clean: {kept:,} of {read:,} pairs kept')" "$translations"

resume=()
if compgen -G "$RUNS/$name/checkpoint-*/trainer_state.json" >/dev/null; then
    resume=(--resume_from_checkpoint last)
fi
# shellcheck disable=SC2086  # EXTRA_FLAGS is a list of words
flags=(--model_name_or_path "$teacher" --data_dir "$DATA" --train_weight 2 --extra_train "$translations-clean"
       --output_dir "$RUNS/$name" --dropout 0.1 --attention_dropout 0.1 --max_tokens 4300
       --learning_rate "${LEARNING_RATE:-5e-4}" --warmup_steps "${WARMUP_STEPS:-500}" --case_augmentation 0.4
       --max_steps 1000000 --save_steps "${SAVE_STEPS:-250}" --save_total_limit 40 --eval_strategy no
       --load_best_model_at_end false --average_last 0 --test_split '' --seed 2 --disable_tqdm true
       --logging_steps 50 "${resume[@]}" ${EXTRA_FLAGS:-})
echo "$(date -u +%FT%TZ) start: train.py ${flags[*]}" >>"$RUNS/$name.log"
nohup taskset -c "$core" "$PYTHON" train.py "${flags[@]}" >>"$RUNS/$name.log" 2>&1 &
echo "$!" >"$RUNS/$name.pid"
echo "started $name on core $core (pid $!): tail -f $RUNS/$name.log"
