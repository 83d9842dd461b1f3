"""Train the Transformer on Multi30k English→German with the paper's recipe, evaluate, and write a Hub-ready folder.

    python train.py --data_dir ../shared/data/multi30k --output_dir runs/base

Every `Seq2SeqTrainingArguments` flag works (`--num_train_epochs`, `--per_device_train_batch_size`,
`--resume_from_checkpoint`, `--push_to_hub --hub_model_id NAME`, ...). The model flags (`--d_model`,
`--encoder_layers`, ...) are the fields of `TransformerMTConfig`, with its defaults and its documentation.
"""

import dataclasses
import json
import os
import re
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from datasets import Dataset
from transformers import (
    DataCollatorForSeq2Seq,
    GenerationConfig,
    HfArgumentParser,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
    TrainerCallback,
    set_seed,
)
from transformers.trainer_utils import get_last_checkpoint

from modeling import TransformerMTConfig, TransformerMTForConditionalGeneration
from modeling.modeling_transformer_mt import set_translation_defaults
from tokenizer import config_token_fields, load_tokenizer, train_tokenizer
from transformer_en_de import data
from transformer_en_de.evaluation import ChrF, SacreBleu
from transformer_en_de.model_card import write_model_card

# The paper's recipe (section 5.3-5.4) as defaults; anything given on the command line overrides them
# (argparse keeps the last occurrence of a flag).
RECIPE_DEFAULTS = [
    "--optim", "adamw_torch",
    "--adam_beta1", "0.9",
    "--adam_beta2", "0.98",
    "--adam_epsilon", "1e-9",
    "--weight_decay", "0.0",
    "--lr_scheduler_type", "inverse_sqrt",
    "--warmup_steps", "4000",
    "--max_grad_norm", "1.0",
    "--bf16", "true",
    "--train_sampling_strategy", "group_by_length",
    "--per_device_train_batch_size", "128",
    "--per_device_eval_batch_size", "128",
    "--num_train_epochs", "20",
    "--eval_strategy", "epoch",
    "--save_strategy", "epoch",
    "--save_total_limit", "2",
    "--load_best_model_at_end", "true",
    "--metric_for_best_model", "bleu",
    "--greater_is_better", "true",
    "--predict_with_generate", "true",
    "--generation_num_beams", "4",
    "--logging_steps", "50",
    "--report_to", "none",
    "--dataloader_num_workers", "0",
]

# Architecture flags: the config's own fields, defaults and documentation (no second copy of hyperparameters).
ARCHITECTURE_FIELDS = (
    "d_model", "encoder_layers", "decoder_layers", "num_attention_heads", "d_ff", "dropout", "attention_dropout",
    "activation_dropout", "max_position_embeddings", "norm_placement", "tie_word_embeddings", "init_std",
    "label_smoothing",
)


def _config_help(name: str) -> str:
    """The Args: entry of `name` in the config docstring."""
    match = re.search(rf"\n\s+{name} \(`[^`]*`[^)]*\):\n\s+(.+?)(?:\n\s+\w+ \(`|\Z)", TransformerMTConfig.__doc__, re.S)
    return " ".join(match.group(1).split()) if match else ""


_config_fields = {f.name: f for f in dataclasses.fields(TransformerMTConfig)}
ModelArguments = dataclasses.make_dataclass(
    "ModelArguments",
    [
        (name, config_field.type, field(default=config_field.default, metadata={"help": _config_help(name)}))
        for name, config_field in ((name, _config_fields[name]) for name in ARCHITECTURE_FIELDS)
    ],
)


@dataclass
class DataArguments:
    data_dir: str | None = field(
        default=None,
        metadata={"help": "Folder with {split}.{lang} text files. Default: download Multi30k into a local cache."},
    )
    source_lang: str = field(default="en")
    target_lang: str = field(default="de")
    train_split: str = field(default="train")
    validation_split: str = field(default="val")
    test_split: str = field(default="test_2016_flickr", metadata={"help": "Scored once at the end; '' to skip."})
    max_source_length: int = field(default=128, metadata={"help": "Longer sources are truncated (tokens)."})
    max_target_length: int = field(default=128, metadata={"help": "Longer targets are truncated (tokens)."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Use only the first N training pairs."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Use only the first N validation pairs."})
    max_test_samples: int | None = field(default=None, metadata={"help": "Use only the first N test pairs."})


@dataclass
class TokenizerArguments:
    tokenizer_name: str | None = field(
        default=None, metadata={"help": "An existing tokenizer folder; default: train one on the training split."}
    )
    vocab_size: int = field(default=8000, metadata={"help": "BPE vocabulary size when training a tokenizer."})
    bpe_min_frequency: int = field(default=2, metadata={"help": "Minimum pair frequency for a BPE merge."})


def parse_arguments(argv: list[str]):
    parser = HfArgumentParser((DataArguments, TokenizerArguments, ModelArguments, Seq2SeqTrainingArguments))
    # bf16 autocast needs `use_cpu` to be said explicitly where there is no GPU.
    device_defaults = [] if torch.cuda.is_available() else ["--use_cpu", "true"]
    data_args, tokenizer_args, model_args, training_args = parser.parse_args_into_dataclasses(
        args=RECIPE_DEFAULTS + device_defaults + argv
    )
    if "--learning_rate" not in " ".join(argv):
        # The paper's peak rate: d_model^-0.5 * warmup^-0.5, reached at the end of the linear warm-up.
        training_args.learning_rate = model_args.d_model**-0.5 * max(training_args.warmup_steps, 1) ** -0.5
    if training_args.include_num_input_tokens_seen == "no":
        # Logs tokens seen and tokens per second (real source tokens, padding excluded).
        training_args.include_num_input_tokens_seen = "non_padding"
    return data_args, tokenizer_args, model_args, training_args


def load_split(data_dir: Path, split: str, data_args: DataArguments, limit: int | None, clean: bool):
    source_path, target_path = data.split_paths(data_dir, split, data_args.source_lang, data_args.target_lang)
    sources, targets = data.read_parallel(source_path, target_path)
    if clean:
        sources, targets, dropped = data.clean_pairs(sources, targets)
        reasons = ", ".join(f"{count} {reason}" for reason, count in dropped.items()) or "none"
        print(f"[data] {split}: kept {len(sources)} pairs, dropped {sum(dropped.values())} ({reasons})")
    else:
        print(f"[data] {split}: {len(sources)} pairs (kept as they are, so scores stay comparable)")
    if limit is not None:
        sources, targets = sources[:limit], targets[:limit]
    return sources, targets


def prepare_tokenizer(tokenizer_args: TokenizerArguments, output_dir: Path, train_sources, train_targets, max_len):
    """The tokenizer of this run: given, or already in the output folder (a resumed run), or trained now."""
    if tokenizer_args.tokenizer_name:
        return load_tokenizer(tokenizer_args.tokenizer_name)
    if (output_dir / "tokenizer.json").is_file():
        print(f"[tokenizer] reusing {output_dir / 'tokenizer.json'}")
        return load_tokenizer(output_dir)
    started = time.time()
    tokenizer = train_tokenizer(
        texts=train_sources + train_targets,
        vocab_size=tokenizer_args.vocab_size,
        min_frequency=tokenizer_args.bpe_min_frequency,
        model_max_length=max_len,
    )
    output_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(output_dir)  # saved at once, so a resumed run uses the very same vocabulary
    print(f"[tokenizer] trained a {len(tokenizer)}-token joint BPE in {time.time() - started:.1f}s")
    return tokenizer


def tokenize(tokenizer, sources, targets, data_args: DataArguments) -> Dataset:
    encoded = tokenizer(
        sources,
        text_target=targets,
        max_length=data_args.max_source_length,
        truncation=True,
    )
    # Labels can be longer than sources; truncate them to their own limit, keeping the final </s>.
    labels = [
        ids if len(ids) <= data_args.max_target_length else ids[: data_args.max_target_length - 1] + [ids[-1]]
        for ids in encoded["labels"]
    ]
    return Dataset.from_dict(
        {
            "input_ids": encoded["input_ids"],
            "attention_mask": encoded["attention_mask"],
            "labels": labels,
            "length": [len(ids) for ids in encoded["input_ids"]],
        }
    )


class StartingStep(TrainerCallback):
    """Remembers the step this process started training at: 0, or the step of the checkpoint it resumed."""

    step = 0

    def on_train_begin(self, args, state, control, **kwargs):
        self.step = state.global_step
        if self.step:
            print(f"[train] resumed at step {self.step} of {state.max_steps}")


def build_compute_metrics(tokenizer):
    bleu, chrf = SacreBleu(), ChrF()

    def compute_metrics(evaluation):
        predictions, labels = evaluation.predictions, evaluation.label_ids
        predictions = [[t for t in row if t >= 0] for row in predictions.tolist()]
        labels = [[t for t in row if t >= 0] for row in labels.tolist()]  # -100 marks padding
        hypotheses = tokenizer.batch_decode(predictions, skip_special_tokens=True)
        references = tokenizer.batch_decode(labels, skip_special_tokens=True)  # byte-level BPE: exact text
        return {
            "bleu": bleu.compute(predictions=hypotheses, references=references)["score"],
            "chrf": chrf.compute(predictions=hypotheses, references=references)["score"],
            "mean_length": sum(len(tokenizer.tokenize(text)) for text in hypotheses) / max(len(hypotheses), 1),
        }

    return compute_metrics


def score_test_set(trainer, tokenizer, test_dataset, references, num_beams, length_penalty):
    """Beam search over the test sources; BLEU and chrF against the untouched reference lines."""
    # Length-grouped sampling applies to evaluation too and would shuffle the sentences: keep the file's order.
    trainer.args.train_sampling_strategy = "sequential"
    output = trainer.predict(test_dataset, metric_key_prefix="test", num_beams=num_beams, length_penalty=length_penalty)
    predictions = [[t for t in row if t >= 0] for row in output.predictions.tolist()]
    hypotheses = tokenizer.batch_decode(predictions, skip_special_tokens=True)
    bleu = SacreBleu().compute(predictions=hypotheses, references=references)
    chrf = ChrF().compute(predictions=hypotheses, references=references)
    return hypotheses, {
        "bleu": round(bleu["score"], 2),
        "chrf": round(chrf["score"], 2),
        "num_sentences": len(references),
        "num_beams": num_beams,
        "length_penalty": length_penalty,
        "bleu_signature": bleu["signature"],
        "chrf_signature": chrf["signature"],
    }


def validation_curve(log_history: list[dict]) -> list[dict]:
    return [
        {
            "epoch": round(entry["epoch"], 2),
            "step": entry["step"],
            "loss": round(entry["eval_loss"], 4),
            "bleu": round(entry["eval_bleu"], 2),
            "chrf": round(entry["eval_chrf"], 2),
        }
        for entry in log_history
        if "eval_bleu" in entry
    ]


def resolve_resume(value: str | None, output_dir: str) -> str | bool | None:
    """`--resume_from_checkpoint last` (or true) continues from the newest checkpoint in the output folder."""
    if value is None or value.lower() in ("", "false", "no"):
        return None
    if value.lower() in ("last", "true", "yes"):
        last = get_last_checkpoint(output_dir) if os.path.isdir(output_dir) else None
        if last is None:
            raise SystemExit(f"error: --resume_from_checkpoint {value}: no checkpoint-* folder in {output_dir}.")
        return last
    if not os.path.isdir(value):
        raise SystemExit(f"error: --resume_from_checkpoint {value}: no such checkpoint folder.")
    return value


def without_resume_flag(argv: list[str]) -> list[str]:
    """The command that trains this model from scratch: a resumed run is the same run."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg.startswith("--resume_from_checkpoint"):
            skip = "=" not in arg
        else:
            kept.append(arg)
    return kept


def main(argv: list[str] | None = None) -> dict:
    argv = sys.argv[1:] if argv is None else argv
    data_args, tokenizer_args, model_args, training_args = parse_arguments(argv)
    set_seed(training_args.seed)
    output_dir = Path(training_args.output_dir)
    resume = resolve_resume(training_args.resume_from_checkpoint, training_args.output_dir)
    # We push the finished folder ourselves (after the test score and the card exist), not the Trainer's checkpoints.
    push_requested, training_args.push_to_hub = training_args.push_to_hub, False

    try:
        data_dir = Path(data_args.data_dir) if data_args.data_dir else data.download_multi30k()
        train_sources, train_targets = load_split(
            data_dir, data_args.train_split, data_args, data_args.max_train_samples, clean=True
        )
        val_sources, val_targets = load_split(
            data_dir, data_args.validation_split, data_args, data_args.max_eval_samples, clean=False
        )
        test_sources = test_targets = None
        if data_args.test_split:
            test_sources, test_targets = load_split(
                data_dir, data_args.test_split, data_args, data_args.max_test_samples, clean=False
            )
    except data.DataError as error:
        raise SystemExit(f"error: {error}") from None

    max_positions = model_args.max_position_embeddings
    if max(data_args.max_source_length, data_args.max_target_length) > max_positions:
        raise SystemExit(
            f"error: max_source_length/max_target_length ({data_args.max_source_length}/"
            f"{data_args.max_target_length}) exceed max_position_embeddings ({max_positions})."
        )
    tokenizer = prepare_tokenizer(tokenizer_args, output_dir, train_sources, train_targets, max_positions)

    config = TransformerMTConfig(**config_token_fields(tokenizer), **dataclasses.asdict(model_args))
    model = TransformerMTForConditionalGeneration(config)
    num_parameters = model.num_parameters()
    print(f"[model] {num_parameters:,} parameters: {json.dumps(dataclasses.asdict(model_args))}")
    training_args.generation_max_length = data_args.max_target_length

    train_dataset = tokenize(tokenizer, train_sources, train_targets, data_args)
    eval_dataset = tokenize(tokenizer, val_sources, val_targets, data_args)
    trainer = Seq2SeqTrainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100),
        processing_class=tokenizer,
        compute_metrics=build_compute_metrics(tokenizer),
        callbacks=[starting_step := StartingStep()],
    )
    started = time.time()
    train_result = trainer.train(resume_from_checkpoint=resume)
    print(f"[train] done in {(time.time() - started) / 60:.1f} min: {train_result.metrics}")

    # The best checkpoint (by validation BLEU) is loaded back at the end of training. Evaluation rewrote the
    # generation config with global defaults: restore the translation defaults before scoring and saving.
    # Score and save exactly what a user will download: the best checkpoint, loaded the way users load it.
    if trainer.state.best_model_checkpoint:
        trainer.model = trainer.model_wrapped = TransformerMTForConditionalGeneration.from_pretrained(
            trainer.state.best_model_checkpoint
        )
    model = trainer.model
    model.config.use_cache = True  # the Trainer turns the cache off for training; users decode with it
    model.generation_config = GenerationConfig()
    set_translation_defaults(model.generation_config, model.config)
    trainer.save_model(output_dir)
    tokenizer.save_pretrained(output_dir)
    results = {
        "num_parameters": num_parameters,
        "trained_steps": {"from": starting_step.step, "to": trainer.state.global_step},
        "best_checkpoint": trainer.state.best_model_checkpoint,
        "validation_curve": validation_curve(trainer.state.log_history),
    }
    curve = results["validation_curve"]
    if curve:
        best = max(curve, key=lambda point: point["bleu"])
        results["validation"] = {"bleu": best["bleu"], "chrf": best["chrf"], "epoch": best["epoch"]}
    if test_sources is not None:
        test_dataset = tokenize(tokenizer, test_sources, test_targets, data_args)
        generation = model.generation_config
        hypotheses, results[data_args.test_split] = score_test_set(
            trainer, tokenizer, test_dataset, test_targets, generation.num_beams, generation.length_penalty
        )
        (output_dir / f"translations.{data_args.test_split}.{data_args.target_lang}").write_text(
            "\n".join(hypotheses) + "\n", encoding="utf-8"
        )
        print(f"[test] {data_args.test_split}: {json.dumps(results[data_args.test_split])}")
    (output_dir / "eval_results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")

    command = "python train.py " + shlex.join(without_resume_flag(argv))
    write_model_card(
        output_dir,
        config=config,
        results=results,
        test_split=data_args.test_split,
        command=command,
        hub_model_id=training_args.hub_model_id,
    )
    print(f"[save] Hub-ready folder: {output_dir}")

    if push_requested:
        from publish import PublishError, push_folder

        if not training_args.hub_model_id:
            raise SystemExit("error: --push_to_hub needs --hub_model_id NAME (user/model).")
        try:
            url = push_folder(
                output_dir, training_args.hub_model_id, token=training_args.hub_token, ignore_patterns=["checkpoint-*"]
            )
        except PublishError as error:
            raise SystemExit(f"error: {error}") from None
        print(f"[push] {url}")
    return results


if __name__ == "__main__":
    main()
