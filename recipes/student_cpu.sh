#!/usr/bin/env bash
# A student of the shipped size, from scratch, on Multi30k task 1 and the distillation data of
# ../shared/data/multi30k-distill (four teachers' forward translations, the beam back-translation tagged), on CPU
# cores in the background. Resumable: run the same command again and it goes on from the last complete checkpoint.
#
#   bash recipes/student_cpu.sh NAME [CORES]        e.g. bash recipes/student_cpu.sh s5-all 0   (or 0,1)
#
# One process per listed core (torchrun with two or more), one thread each, pinned with taskset, so that a second
# job on the other core does not slow it several-fold. Log: runs/NAME.log. Checkpoints: runs/NAME/checkpoint-*,
# every SAVE_STEPS steps; no evaluation during the run (checkpoints are chosen afterwards by
# average_checkpoints.py on validation). Environment: DISTILL (the data folder), DATA (task 1), SAVE_STEPS, MIX
# (the --extra_train list), EXTRA_FLAGS (appended).
set -euo pipefail
name=${1:?usage: $0 NAME [CORES]}
cores=${2:-0}
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
DATA=${DATA:-../shared/data/multi30k}
DISTILL=${DISTILL:-../shared/data/multi30k-distill}
SAVE_STEPS=${SAVE_STEPS:-500}
MIX=${MIX:-"$DISTILL/teacher-t11 $DISTILL/teacher-t12 $DISTILL/teacher-t13 $DISTILL/teacher-big $DISTILL/bt-beam:tagged"}
nproc=$(tr ',' '\n' <<<"$cores" | wc -l)

resume=()
if compgen -G "runs/$name/checkpoint-*/trainer_state.json" >/dev/null; then
    resume=(--resume_from_checkpoint last)
fi
# shellcheck disable=SC2086  # MIX and EXTRA_FLAGS are lists of words
flags=(--data_dir "$DATA" --train_weight 2 --extra_train $MIX --tokenizer_name models/transformer-en-de
       --output_dir "runs/$name" --d_model 256 --encoder_layers 3 --decoder_layers 3 --num_attention_heads 4
       --d_ff 1024 --dropout 0.1 --attention_dropout 0.1 --max_tokens 4300 --learning_rate 2e-3 --warmup_steps 1000
       --case_augmentation 0.4 --max_steps 1000000 --save_steps "$SAVE_STEPS" --save_total_limit 30
       --eval_strategy no --load_best_model_at_end false --average_last 0 --test_split '' --seed 1
       --disable_tqdm true --logging_steps 50 "${resume[@]}" ${EXTRA_FLAGS:-})
mkdir -p runs
if [ "$nproc" -gt 1 ]; then
    launch=("$(dirname "$PYTHON")/torchrun" --nproc_per_node "$nproc" train.py)
else
    launch=("$PYTHON" train.py)
fi
echo "$(date -u +%FT%TZ) start: ${launch[*]} ${flags[*]}" >>"runs/$name.log"
OMP_NUM_THREADS=1 nohup taskset -c "$cores" "${launch[@]}" "${flags[@]}" >>"runs/$name.log" 2>&1 &
echo "started $name on core(s) $cores (pid $!): tail -f runs/$name.log"
