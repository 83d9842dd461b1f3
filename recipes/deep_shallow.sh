#!/usr/bin/env bash
# A deep-encoder, shallow-decoder student trained to convergence on CPU cores, in the background (model round 7):
# the start is made once from a trained model folder (recipes/deep_shallow_init.py: the encoder's layers stacked,
# the decoder's first layers kept), then it is fine-tuned on task 1 (twice) and the distillation mix with an inverse
# square root schedule, which never reaches zero at an arbitrary stop, so a run can be stopped, resumed and stopped
# again and its checkpoints stay comparable. Resumable: run the same command again and it goes on from the last
# complete checkpoint (the tokenized mix is kept in ~/.cache/transformer-en-de/prepared, so a resume starts at once).
#
#   bash recipes/deep_shallow.sh START NAME [CORE]   e.g. bash recipes/deep_shallow.sh models/transformer-en-de r7-6x1 1
#
# START is a trained model folder (its depth is changed to ENCODER_LAYERS + DECODER_LAYERS in runs/NAME-init) or an
# existing runs/NAME-init. Writes runs/NAME/checkpoint-* every SAVE_STEPS steps and runs/NAME.log; choose afterwards
# with average_checkpoints.py on validation (recipes/validation_curve.sh scores each checkpoint). One thread, pinned to
# CORE. Environment: ENCODER_LAYERS (6), DECODER_LAYERS (1), NUM_BEAMS (the start's default beam width; START's if
# unset), MIX (the --extra_train list; default the four teachers
# and the tagged beam back-translation), DATA, DISTILL, RUNS, LEARNING_RATE (6e-4), WARMUP_STEPS (1000), SAVE_STEPS
# (250), EXTRA_FLAGS (appended to train.py's flags), FORK.
#
# FORK=RUNS/OTHER/checkpoint-N starts NAME as a fork of another run of this recipe: its start (RUNS/OTHER-init) and that
# checkpoint (weights, optimizer state, schedule, step) are copied and NAME goes on from there with its own MIX or
# EXTRA_FLAGS, so the two runs' checkpoints compare at the same steps. Once NAME has a checkpoint of its own, FORK is
# not read again (the same command resumes the fork). A resume or fork with another LEARNING_RATE goes on at that
# peak: the same schedule from the same step, scaled.
set -euo pipefail
start=${1:?usage: $0 START NAME [CORE]}
name=${2:?usage: $0 START NAME [CORE]}
core=${3:-1}
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
DATA=${DATA:-../shared/data/multi30k}
DISTILL=${DISTILL:-../shared/data/multi30k-distill}
RUNS=${RUNS:-runs}
MIX=${MIX:-"$DISTILL/teacher-t11 $DISTILL/teacher-t12 $DISTILL/teacher-t13 $DISTILL/teacher-big $DISTILL/bt-beam:tagged"}
export OMP_NUM_THREADS=1
mkdir -p "$RUNS"

init="$RUNS/$name-init"
has_checkpoint() { compgen -G "$RUNS/$name/checkpoint-*/trainer_state.json" >/dev/null; }
if [ -n "${FORK:-}" ] && ! has_checkpoint; then
    parent=$(dirname "$FORK")
    [ -f "$FORK/trainer_state.json" ] ||
        { echo "error: FORK=$FORK is not a complete checkpoint of a run (no trainer_state.json in it)" >&2; exit 1; }
    [ -f "$parent-init/config.json" ] ||
        { echo "error: FORK=$FORK: no $parent-init/config.json, the start of the run it belongs to" >&2; exit 1; }
    [ -f "$init/config.json" ] || { rm -rf "$init"; cp -r "$parent-init" "$init"; }
    mkdir -p "$RUNS/$name"
    cp -r "$FORK" "$RUNS/$name/"
    cp "$parent"/tokenizer*.json "$RUNS/$name/"
fi
if [ ! -f "$init/config.json" ]; then
    taskset -c "$core" "$PYTHON" recipes/deep_shallow_init.py "$start" "$init" \
        --encoder_layers "${ENCODER_LAYERS:-6}" --decoder_layers "${DECODER_LAYERS:-1}" \
        ${NUM_BEAMS:+--num_beams "$NUM_BEAMS"}
fi

# START's own tokenizer.json (the same bytes on every machine, so the kept tokenized mix is found again).
tokenizer="$start"
[ -f "$start/tokenizer.json" ] || tokenizer="$init"

resume=()
if has_checkpoint; then
    resume=(--resume_from_checkpoint last)
fi
# shellcheck disable=SC2086  # MIX and EXTRA_FLAGS are lists of words
flags=(--model_name_or_path "$init" --tokenizer_name "$tokenizer" --data_dir "$DATA" --train_weight 2 --extra_train $MIX
       --output_dir "$RUNS/$name" --dropout 0.1 --attention_dropout 0.1 --max_tokens 4300
       --learning_rate "${LEARNING_RATE:-6e-4}" --warmup_steps "${WARMUP_STEPS:-1000}" --lr_scheduler_type inverse_sqrt
       --case_augmentation 0.4 --max_steps 1000000 --save_steps "${SAVE_STEPS:-250}" --save_total_limit 60
       --eval_strategy no --load_best_model_at_end false --average_last 0 --test_split '' --seed 7
       --disable_tqdm true --logging_steps 50 "${resume[@]}" ${EXTRA_FLAGS:-})
echo "$(date -u +%FT%TZ) start: train.py ${flags[*]}" >>"$RUNS/$name.log"
nohup taskset -c "$core" "$PYTHON" train.py "${flags[@]}" >>"$RUNS/$name.log" 2>&1 &
echo "$!" >"$RUNS/$name.pid"
echo "started $name on core $core (pid $!): tail -f $RUNS/$name.log"
