"""Train the Transformer on Multi30k English→German, score it, and write a Hub-ready folder.

    # a try, about 25 s of one CPU core (`make tiny-run`, a few more flags):
    python train.py --data_dir ../shared/data/multi30k --output_dir runs/tiny \\
        --max_train_samples 2000 --num_train_epochs 1 --d_model 64 --d_ff 256 --vocab_size 2000

The defaults are the paper's base model and recipe (section 5): d_model 512, 6+6 layers, 8 heads, 20 epochs of
128-pair batches, Adam 0.9/0.98/1e-9 with the inverse-square-root schedule, label smoothing 0.1, BLEU/chrF on
validation and a checkpoint every epoch, the best one shipped. On a CPU that is slow: about 10 s a step on one
core of an AVX-512 BF16 CPU, so about 38 minutes an epoch and 12.5 hours for the 20, validation not counted
(docs/training.md).

The shipped model (models/transformer-en-de) is smaller and distilled: d_model 256, 3+3 layers, 4 heads, dropout 0.3,
trained on Multi30k plus two teachers' translations of its training sources. Its commands are in its
eval_results.json ("command") and RESULTS.md; `recipes/distill_gpu.sh` runs them on one GPU. One run of its size
without distillation (val BLEU 41.89 after 32 epochs and averaging; about 9 minutes an epoch on one AVX2 core):

    python train.py --data_dir ../shared/data/multi30k --output_dir runs/d256-drop03 --d_model 256 \\
        --encoder_layers 3 --decoder_layers 3 --num_attention_heads 4 --d_ff 1024 --dropout 0.3 \\
        --attention_dropout 0.1 --num_train_epochs 32 --warmup_steps 1500 --learning_rate 1.5e-3 --average_last 10

Flags use transformers' underscores (dashed spellings work too). --help lists the project's flags and the Trainer
flags whose defaults are the recipe's; every other `Seq2SeqTrainingArguments` flag works too (--help-all lists them
all). The model flags (--d_model, --dropout, ...) are the fields of `TransformerMTConfig`, with its defaults.

An --output_dir that holds files is refused unless you say --resume_from_checkpoint last (go on from the newest sound
checkpoint) or --overwrite_output_dir. At the end the chosen model is saved, scored on validation and test through the
translation engine, and eval_results.json and the model card are written; --push_to_hub --hub_model_id NAME pushes it.
More data, other directions, datasets and streaming, several processes: docs/training.md.
"""

import dataclasses
import json
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import DataCollatorForSeq2Seq, HfArgumentParser, Seq2SeqTrainingArguments, set_seed

from transformer_en_de import evaluation
from transformer_en_de.publishing.model_card import write_model_card
from transformer_en_de.publishing.push import PublishError, push_folder
from transformer_en_de.training import checkpoints, dataset, distillation, loop, precision
from transformer_en_de.training.dataset import DataArguments, TokenizerArguments
from transformer_en_de.training.distillation import DistillationArguments
from transformer_en_de.training.flags import HelpFormatter, brief_help, model_arguments, recipe
from transformer_en_de.training.loop import REGULARISATION_FIELDS

# ------------------------------------------------------------------------------------------------------------ arguments
#
# A flag left out is None where its value comes from elsewhere (the config, the trained model, the machine, the
# learning-rate rule); that is how "given on the command line" is told apart, everywhere. The data and tokenizer flags
# are defined beside the code that reads them (`dataset.DataArguments`, `TokenizerArguments`).


ModelArguments = model_arguments()  # a flag per field of the config, its documentation as help


@dataclass
class StartArguments:
    model_name_or_path: str | None = field(
        default=None,
        metadata={
            "help": "Fine-tune: start from this trained model of the project (a folder or a Hub id) instead of random "
            "weights. Its architecture and tokenizer come with it; of the model flags only the regularisation ones ("
            + ", ".join(f"--{name}" for name in REGULARISATION_FIELDS)
            + ") may change. A tag token new to its "
            "tokenizer gets a new embedding."
        },
    )
    # Where its files are on this machine (the folder itself, or the Hub download): set by parse_arguments.
    folder: Path | None = field(default=None, init=False)


@dataclass
class SelectionArguments:
    average_last: int = field(
        default=0,
        metadata={
            "help": "At the end, average the last n checkpoints for n in 1, 2, 5, 10, 20 up to N (and N), score each "
            "on validation and ship the best (the best single checkpoint is a candidate too). Keeps enough "
            "checkpoints: --save_total_limit is raised to N + 1. 0: ship the best checkpoint."
        },
    )


@dataclass
class TrainingArguments(Seq2SeqTrainingArguments):
    """`Seq2SeqTrainingArguments` with the paper's recipe as defaults (Adam 0.9/0.98/1e-9, inverse-square-root schedule
    after 4000 warm-up steps, section 5.3), the run's evaluation and selection, the precision the machine computes
    natively, and batches of about N tokens on request."""

    optim: str = recipe("optim", "adamw_torch")
    adam_beta1: float = recipe("adam_beta1", 0.9)
    adam_beta2: float = recipe("adam_beta2", 0.98)
    adam_epsilon: float = recipe("adam_epsilon", 1e-9)
    weight_decay: float = recipe("weight_decay", 0.0)
    learning_rate: float | None = recipe(
        "learning_rate", None, "Default: the paper's peak d_model^-0.5 * warmup_steps^-0.5, reached after warm-up."
    )
    lr_scheduler_type: str = recipe("lr_scheduler_type", "inverse_sqrt")
    warmup_steps: float = recipe("warmup_steps", 4000)
    max_grad_norm: float = recipe("max_grad_norm", 1.0)
    train_sampling_strategy: str = recipe(
        "train_sampling_strategy",
        "group_by_length",
        help="How pairs are drawn into batches: 'group_by_length' "
        "(pairs of about one length together, so little padding), 'random', 'sequential' or 'batch_rebalance'.",
    )
    per_device_train_batch_size: int = recipe("per_device_train_batch_size", 128)
    per_device_eval_batch_size: int = recipe("per_device_eval_batch_size", 128)
    num_train_epochs: float = recipe("num_train_epochs", 20.0)
    eval_strategy: str | None = recipe(
        "eval_strategy", None, "Default: epoch; steps (every --save_steps) when training is counted in --max_steps."
    )
    save_strategy: str | None = recipe(
        "save_strategy", None, "Default: epoch; steps when training is counted in --max_steps (as --eval_strategy)."
    )
    save_total_limit: int | None = recipe(
        "save_total_limit",
        2,
        help="Checkpoints kept in --output_dir, the oldest deleted first; the best one is kept "
        "besides (--load_best_model_at_end).",
    )
    load_best_model_at_end: bool = recipe("load_best_model_at_end", True)
    metric_for_best_model: str | None = recipe(
        "metric_for_best_model",
        "bleu",
        help="The validation score that chooses the best checkpoint: 'bleu' (BLEU "
        "of the translation engine's output), 'chrf', or 'loss' (with --no_greater_is_better).",
    )
    greater_is_better: bool | None = recipe(
        "greater_is_better",
        True,
        help="Whether a higher --metric_for_best_model is better: true for bleu and chrf; "
        "pass --no_greater_is_better with loss.",
    )
    eval_steps: float | None = recipe(
        "eval_steps",
        None,
        help="Update steps between evaluations when --eval_strategy is steps (a float below 1: a "
        "share of all steps). Default: --save_steps.",
    )
    resume_from_checkpoint: str | None = recipe(
        "resume_from_checkpoint",
        None,
        help="Go on from a checkpoint of this run: 'last' (the newest one in "
        "--output_dir that loads; damaged ones are passed over) or a checkpoint folder.",
    )
    push_to_hub: bool = recipe(
        "push_to_hub",
        False,
        help="At the end, push the folder train.py writes (model, tokenizer, card) to "
        "--hub_model_id; checkpoints are never pushed.",
    )
    hub_model_id: str | None = recipe("hub_model_id", None, help="The Hub repo --push_to_hub pushes to: user/model.")
    logging_steps: float = recipe("logging_steps", 50, "A run shorter than ten times this logs ten times.")
    ddp_find_unused_parameters: bool | None = recipe(
        "ddp_find_unused_parameters", False, "Every parameter takes part in every step."
    )
    include_num_input_tokens_seen: str = recipe(
        "include_num_input_tokens_seen", "non_padding", "Logs real source tokens seen and tokens per second."
    )
    use_cpu: bool = recipe("use_cpu", not torch.cuda.is_available(), "Default: true where there is no CUDA GPU.")
    bf16: bool | None = recipe(
        "bf16",
        None,
        "Default: bf16 autocast where the hardware computes bf16 natively (a recent GPU; a CPU with "
        "AVX-512 BF16 or AMX), float32 elsewhere, where bf16 would be emulated (33x slower on an AVX2 CPU).",
    )
    overwrite_output_dir: bool = field(
        default=False,
        metadata={
            "help": "Train into an --output_dir that holds another run: its checkpoints and tokenizer are "
            "deleted first. Without this (or --resume_from_checkpoint), such a folder is refused."
        },
    )
    max_tokens: int | None = field(
        default=None,
        metadata={
            "help": "Batches of at most this many tokens (padded, the longer side of each pair) instead of "
            "--per_device_train_batch_size pairs, like fairseq's --max-tokens: pairs sorted by length, so "
            "almost no padding. E.g. 2150: about as many steps a Multi30k epoch as 128-pair batches."
        },
    )

    def __post_init__(self):
        if self.bf16 is None:
            self.bf16 = not self.fp16 and precision.native_bf16(use_cpu=self.use_cpu)
        by_steps = "steps" if self.max_steps > 0 else "epoch"  # a run counted in steps may be a stream: no epochs
        if self.eval_strategy is None:
            self.eval_strategy = by_steps
        if self.save_strategy is None:
            self.save_strategy = by_steps
        if self.eval_strategy == "steps" and self.eval_steps is None:
            self.eval_steps = self.save_steps
        super().__post_init__()


# Trainer flags --help lists besides the project's own and those with the recipe's defaults (TrainingArguments).
EVERYDAY_TRAINER_FLAGS = {
    "output_dir",
    "resume_from_checkpoint",
    "max_steps",
    "save_steps",
    "eval_steps",
    "seed",
    "gradient_accumulation_steps",
    "report_to",
    "push_to_hub",
    "hub_model_id",
}
ARGUMENT_GROUPS = (
    DataArguments,
    TokenizerArguments,
    ModelArguments,
    StartArguments,
    DistillationArguments,
    SelectionArguments,
    TrainingArguments,
)


def parse_arguments(argv: list[str]):
    """The seven argument groups, parsed once; the values left to other sources resolved."""
    parser = HfArgumentParser(
        ARGUMENT_GROUPS,
        usage="python train.py --output_dir DIR [--data_dir DIR] [flags below]",
        description=__doc__,
        formatter_class=HelpFormatter,
    )
    ours = {name for group in ARGUMENT_GROUPS[:-1] for name in group.__dataclass_fields__}
    brief_help(parser, ours | set(TrainingArguments.__annotations__) | EVERYDAY_TRAINER_FLAGS)
    data_args, tokenizer_args, model_args, start_args, distillation_args, selection_args, training_args = (
        parser.parse_args_into_dataclasses(args=argv)
    )
    dataset.check_data_arguments(data_args, training_args)
    start_args.folder = loop.resolve_architecture(model_args, start_args, tokenizer_args)
    distillation.check_teacher(distillation_args, tokenizer_args, training_args)
    if training_args.learning_rate is None:
        # The paper's peak rate: d_model^-0.5 * warmup^-0.5, reached at the end of the linear warm-up.
        training_args.learning_rate = model_args.d_model**-0.5 * max(training_args.warmup_steps, 1) ** -0.5
    if data_args.streaming and training_args.accelerator_config.dispatch_batches is None:
        # Each process reads the stream itself (its own files where there are enough, else its share of each batch)
        # and pads its own batches: the main process cannot hand out slices of batches padded to different lengths.
        training_args.accelerator_config.dispatch_batches = False
    if selection_args.average_last < 0:
        raise SystemExit(f"error: --average_last {selection_args.average_last}: give a number of checkpoints (>= 1).")
    if selection_args.average_last and training_args.save_total_limit:
        # The last N checkpoints, and the best one besides them (the Trainer never deletes the best).
        training_args.save_total_limit = max(training_args.save_total_limit, selection_args.average_last + 1)
    return data_args, tokenizer_args, model_args, start_args, distillation_args, selection_args, training_args


# ----------------------------------------------------------------------------------------------------------------- run


def main(argv: list[str] | None = None) -> dict:
    argv = sys.argv[1:] if argv is None else argv
    arguments = parse_arguments(argv)
    output_dir = Path(arguments[-1].output_dir)
    try:
        return run(argv, *arguments)
    except Exception as error:  # a failed write may come from any writer (safetensors and tokenizers are Rust)
        message = loop.write_failure(error, output_dir)
        if message is None:
            raise
        raise SystemExit(message) from None


def run(
    argv, data_args, tokenizer_args, model_args, start_args, distillation_args, selection_args, training_args
) -> dict:
    set_seed(training_args.seed)

    # Checks before any work: the push, the lengths, the output folder (never overwrite a run by accident)
    # We push the finished folder ourselves (after the test score and the card exist), not the Trainer's checkpoints.
    push_requested, training_args.push_to_hub = training_args.push_to_hub, False
    if push_requested:
        loop.check_push(training_args.hub_model_id)
    dataset.check_lengths(data_args, model_args.max_position_embeddings)
    resume = loop.prepare_output_dir(training_args)
    output_dir = Path(training_args.output_dir)

    # Loading the datasets
    training_set, validation, test = dataset.load_splits(data_args, training_args, tokenizer_args)

    # Tokenizer: one process trains (or loads) it and saves it; the others wait, then load what it saved
    tag_token = data_args.tag_token if training_set.has_tagged else None
    # the run's tokenizer: the one named, or the one an earlier start kept in the output folder
    teacher = distillation.load_teacher(distillation_args, tokenizer_args.tokenizer_name or output_dir, tag_token)
    if teacher is not None:
        print(
            f"[distillation] teacher {teacher.name}, {teacher.model.num_parameters():,} parameters, weight "
            f"{teacher.weight}"
        )
    tokenizer = dataset.run_tokenizer(
        tokenizer_args, training_args, training_set.tokenizer_texts, model_args.max_position_embeddings, tag_token
    )

    # Model: a new one, or the trained one to fine-tune
    model = loop.model_to_train(model_args, start_args.folder, tokenizer, tag_token)
    num_parameters = model.num_parameters()
    print(f"[model] {num_parameters:,} parameters: {json.dumps(dataclasses.asdict(model_args))}")
    chosen = precision.name(training_args.bf16, training_args.fp16)
    print(f"[precision] {chosen} ({precision.describe(training_args.use_cpu)})")

    # Preprocessing the datasets
    train_dataset = dataset.tokenize_training_set(tokenizer, training_set, data_args, training_args)
    if not data_args.streaming:  # a stream's length is not known in advance
        print(f"[data] training on {len(train_dataset):,} pairs an epoch")
    eval_dataset = dataset.tokenize_pairs(tokenizer, *validation, data_args)  # for the validation loss

    # Data collator: pads each batch to its longest pair; padded label positions are -100, left out of the loss
    data_collator = DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100)

    # Training
    training_args.generation_max_length = data_args.max_target_length
    trainer = loop.TranslationTrainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        data_collator=data_collator,
        processing_class=tokenizer,
        callbacks=[
            starting_step := loop.StartingStep(),
            rate := loop.ResumedAtRequestedRate(),
            loop.ShortRunLogging(),
            loop.FreeHeapGivenBack(),
        ],
        validation=validation,
        max_tokens=training_args.max_tokens,
        teacher=teacher,
    )
    started = time.time()
    train_result = trainer.train(resume_from_checkpoint=resume)
    print(f"[train] done in {(time.time() - started) / 60:.1f} min: {train_result.metrics}")
    if not trainer.is_world_process_zero():
        return {}  # one process chooses, scores, saves and pushes

    # Choosing the model to ship: the best checkpoint by validation BLEU (loaded the way users load it), or with
    # --average_last the best of the averages of the last checkpoints, chosen on validation through the engine
    facts = loop.training_facts(
        trainer, starting_step.step, data_args, training_set, start_args.model_name_or_path, tag_token
    )
    if teacher is not None:
        facts.update(teacher.facts())
    if rate.change:
        facts["learning_rate_changed"] = rate.change
    model, val_scores, choice = checkpoints.model_to_ship(trainer, selection_args.average_last, tokenizer, validation)
    facts.update(choice)
    checkpoints.restore_translation_defaults(model)  # the Trainer's evaluation rewrote the generation config
    model.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)

    # Scoring what a user downloads, with its own decoding: every real sentence, in file order
    splits = {data_args.validation_split: validation, **({data_args.test_split: test} if test is not None else {})}
    known = {data_args.validation_split: val_scores} if val_scores is not None else None
    scores, translations = evaluation.score_splits(model, tokenizer, splits, known)
    if test is not None:
        (output_dir / f"translations.{data_args.test_split}.{data_args.target_lang}").write_text(
            "\n".join(translations[data_args.test_split]) + "\n", encoding="utf-8"
        )
    evaluation.write_eval_results(
        output_dir,
        num_parameters=num_parameters,
        languages=(data_args.source_lang, data_args.target_lang),
        decoding=evaluation.decoding_record(model),
        scores=scores,
        command=["python train.py " + shlex.join(loop.without_resume_flag(argv))],
        training=facts,
    )
    write_model_card(output_dir, config=model.config, hub_model_id=training_args.hub_model_id)
    print(f"[save] Hub-ready folder: {output_dir}")

    # Pushing
    if push_requested:
        try:
            url = push_folder(
                output_dir, training_args.hub_model_id, token=training_args.hub_token, ignore_patterns=["checkpoint-*"]
            )
        except PublishError as error:
            raise SystemExit(f"error: {error}") from None
        print(f"[push] {url}")
    return evaluation.read_eval_results(output_dir)


if __name__ == "__main__":
    main()
