#!/usr/bin/env bash
# The last phase of a CPU run: fine-tune a model folder (a student, or an average of its checkpoints) on task 1 twice
# and a mix of synthetic pairs (by default the second-round student's own translations of the teacher sources,
# `student_round2.sh`; MIX takes the first round's, as `student_cpu.sh` lists them) with the learning rate falling
# linearly from LEARNING_RATE to zero over STEPS steps, and no warm-up. An inverse-square-root run levels off with its
# rate still high; this lets it settle. Resumable: run the same command again and training goes on from its last
# checkpoint.
# Measured: it lowered val by 0.4 from the second-round student's best average on its mix (docs/notebook.md, round 8)
# and from the first student's best average on the teachers' (round 9).
#
#   bash recipes/cooldown.sh START NAME [CORE]     e.g. bash recipes/cooldown.sh runs/r2-avg-4500 r2-cool 0
#
# Writes runs/NAME/checkpoint-* and runs/NAME.log; choose afterwards with average_checkpoints.py on validation.
# Environment: MIX (the --extra_train list; default TRANSLATIONS, the cleaned second-round pairs, default
# runs/round2/s5-avg-6500-clean), DATA, RUNS, STEPS (2000), LEARNING_RATE (1.5e-4), SAVE_STEPS (250), EXTRA_FLAGS
# (appended to train.py's flags).
set -euo pipefail
start=${1:?usage: $0 START NAME [CORE]}
name=${2:?usage: $0 START NAME [CORE]}
core=${3:-1}
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
DATA=${DATA:-../shared/data/multi30k}
RUNS=${RUNS:-runs}
MIX=${MIX:-${TRANSLATIONS:-$RUNS/round2/s5-avg-6500-clean}}
export OMP_NUM_THREADS=1
for corpus in $MIX; do  # PREFIX[:WEIGHT][:tagged], as train.py --extra_train reads it
    [ -f "${corpus%%:*}.de" ] ||
        { echo "no ${corpus%%:*}.de (the default mix is written by recipes/student_round2.sh)" >&2; exit 1; }
done
mkdir -p "$RUNS"

resume=()
if compgen -G "$RUNS/$name/checkpoint-*/trainer_state.json" >/dev/null; then
    resume=(--resume_from_checkpoint last)
fi
# shellcheck disable=SC2086  # MIX and EXTRA_FLAGS are lists of words
flags=(--model_name_or_path "$start" --data_dir "$DATA" --train_weight 2 --extra_train $MIX
       --output_dir "$RUNS/$name" --dropout 0.1 --attention_dropout 0.1 --max_tokens 4300
       --learning_rate "${LEARNING_RATE:-1.5e-4}" --warmup_steps 0 --lr_scheduler_type linear
       --case_augmentation 0.4 --max_steps "${STEPS:-2000}" --save_steps "${SAVE_STEPS:-250}" --save_total_limit 40
       --eval_strategy no --load_best_model_at_end false --average_last 0 --test_split '' --seed 3
       --disable_tqdm true --logging_steps 50 "${resume[@]}" ${EXTRA_FLAGS:-})
echo "$(date -u +%FT%TZ) start: train.py ${flags[*]}" >>"$RUNS/$name.log"
nohup taskset -c "$core" "$PYTHON" train.py "${flags[@]}" >>"$RUNS/$name.log" 2>&1 &
echo "$!" >"$RUNS/$name.pid"
echo "started $name on core $core (pid $!): tail -f $RUNS/$name.log"
