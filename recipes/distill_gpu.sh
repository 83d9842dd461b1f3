#!/usr/bin/env bash
# Sequence-level knowledge distillation (Kim and Rush 2016) with several teachers (data diversification, Nguyen et
# al. 2020) on one GPU, in two stages that each fit in a few minutes of an H100:
#
#   bash recipes/distill_gpu.sh teachers DATA TOKENIZER WORK [MONO...]
#       N teachers of the shipped size from scratch, seeds 1..N, side by side on the one GPU (each is too small to
#       fill it); each averaged (best of its last 1, 2, 5, 10 checkpoints on validation), then each translates the
#       training sources and its share of the MONO files (English in-domain sentences) with beam 4:
#       WORK/kd/train.tK.{en,de} and WORK/kd/mono.tK.{en,de}.
#   bash recipes/distill_gpu.sh student DATA TOKENIZER WORK NAME [EXTRA_TRAIN...]
#       a student of the shipped size from scratch on DATA's pairs plus the EXTRA_TRAIN corpora (prefixes of
#       train.py's --extra_train), checkpoints every SAVE_STEPS steps, then averaged: WORK/NAME-avg. Another
#       shape through EXTRA_FLAGS (e.g. --encoder_layers 12 --decoder_layers 1).
#   bash recipes/distill_gpu.sh finetune DATA START WORK NAME [EXTRA_TRAIN...]
#       the same, starting from the model folder START (e.g. a deep-encoder start by recipes/deep_shallow_init.py).
#
# DATA holds train.{en,de} and val.{en,de}. Every stage stops its training after TRAIN_SECONDS (the inverse square
# root schedule does not depend on the planned length) and keeps what finished. Environment: TEACHERS (4),
# TRAIN_SECONDS, TRANSLATE_SECONDS, THREADS (CPU threads per process), EXTRA_FLAGS (appended to every train.py).
set -euo pipefail
stage=$1; shift
PYTHON=${PYTHON:-python}
TEACHERS=${TEACHERS:-4}
THREADS=${THREADS:-3}
TRAIN_SECONDS=${TRAIN_SECONDS:-330}
TRANSLATE_SECONDS=${TRANSLATE_SECONDS:-120}
SAVE_STEPS=${SAVE_STEPS:-1000}
# The shipped recipe (models/transformer-en-de/eval_results.json) with batches of about 2,150 tokens and 40% of
# the pairs in capitals or lower case (robust to casing through generate() alone). SHAPE only for a model from
# scratch: a fine-tuned one brings its own.
SHAPE=(--d_model 256 --encoder_layers 3 --decoder_layers 3 --num_attention_heads 4 --d_ff 1024)
RECIPE=(--dropout 0.3 --attention_dropout 0.1 --warmup_steps 1500 --learning_rate 1.5e-3 --max_tokens 2150
        --case_augmentation 0.4 --test_split '' --disable_tqdm true)

train() {  # train OUTPUT_DIR LOG [flags...]: train.py, stopped after TRAIN_SECONDS
    local output=$1 log=$2; shift 2
    OMP_NUM_THREADS=$THREADS timeout --kill-after=30 "$TRAIN_SECONDS" \
        "$PYTHON" train.py --output_dir "$output" "${RECIPE[@]}" "$@" ${EXTRA_FLAGS:-} >"$log" 2>&1 || true
}

student() {  # student DATA TOKENIZER WORK NAME START [EXTRA_TRAIN...]: trained (START: from scratch or a folder)
    local data=$1 tokenizer=$2 work=$3 name=$4 start=$5; shift 5
    local model=("${SHAPE[@]}")
    [ "$start" = scratch ] || model=(--model_name_or_path "$start")
    mkdir -p "$work"
    train "$work/$name" "$work/$name.log" "${model[@]}" --data_dir "$data" --tokenizer_name "$tokenizer" \
        --seed 1 --max_steps 1000000 --save_steps "$SAVE_STEPS" --save_total_limit 12 --average_last 0 \
        ${1:+--extra_train "$@"}
    average "$work/$name" "$data"
}

average() {  # average RUN_DIR DATA: best of the last 1, 2, 5, 10 checkpoints on validation -> RUN_DIR-avg
    OMP_NUM_THREADS=$THREADS "$PYTHON" average_checkpoints.py "$1" --average_last 10 --output_dir "$1-avg" \
        --data_dir "$2" --test_split '' >"$1-avg.log" 2>&1 ||
        { echo "averaging $1 failed: see $1-avg.log and $1.log" >&2; return 1; }
}

translate() {  # translate MODEL INPUT OUTPUT_PREFIX: beam 4, resumable, stopped after TRANSLATE_SECONDS
    OMP_NUM_THREADS=$THREADS timeout "$TRANSLATE_SECONDS" "$PYTHON" translate_corpus.py --model "$1" --input "$2" \
        --output "$3" --source_lang en --target_lang de --num_beams 4 --batch_size 256 --chunk_size 2048 \
        >"$3.log" 2>&1 || true
}

case $stage in
teachers)
    data=$1 tokenizer=$2 work=$3; shift 3
    mkdir -p "$work/kd"
    if [ $# -gt 0 ]; then  # the monolingual sentences, cut into one share per teacher
        cat "$@" | split --number=r/"$TEACHERS" --numeric-suffixes=1 --suffix-length=1 - "$work/kd/mono-part"
    fi
    for k in $(seq 1 "$TEACHERS"); do
        train "$work/teacher-$k" "$work/teacher-$k.log" "${SHAPE[@]}" --data_dir "$data" --tokenizer_name "$tokenizer" \
            --seed "$k" --num_train_epochs 40 --save_total_limit 12 --average_last 0 &
    done
    wait
    for k in $(seq 1 "$TEACHERS"); do average "$work/teacher-$k" "$data" & done
    wait
    for k in $(seq 1 "$TEACHERS"); do
        (translate "$work/teacher-$k-avg" "$data/train.en" "$work/kd/train.t$k"
         if [ -f "$work/kd/mono-part$k" ]; then
             translate "$work/teacher-$k-avg" "$work/kd/mono-part$k" "$work/kd/mono.t$k"
         fi) &
    done
    wait
    ;;
student)
    data=$1 tokenizer=$2 work=$3 name=$4; shift 4
    student "$data" "$tokenizer" "$work" "$name" scratch "$@"
    ;;
finetune)
    data=$1 start=$2 work=$3 name=$4; shift 4
    student "$data" "$start" "$work" "$name" "$start" "$@"
    ;;
*)
    echo "usage: $0 teachers|student|finetune ..." >&2; exit 2
    ;;
esac
