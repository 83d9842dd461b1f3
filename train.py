"""Train the Transformer on Multi30k English→German with the paper's recipe, evaluate, and write a Hub-ready folder.

    python train.py --data_dir ../shared/data/multi30k --output_dir runs/base
    torchrun --nproc_per_node 8 train.py --dataset_name wmt14 --dataset_config_name de-en --output_dir runs/wmt14 ...

Every `Seq2SeqTrainingArguments` flag works (`--num_train_epochs`, `--per_device_train_batch_size`,
`--resume_from_checkpoint`, `--push_to_hub --hub_model_id NAME`, ...). The model flags (`--d_model`,
`--encoder_layers`, ...) are the fields of `TransformerMTConfig`, with its defaults and its documentation.

More training data and other directions:

    --extra_train bt/task2:0.5:tagged   more corpora (PREFIX.{src,tgt} files, seen WEIGHT times per epoch, synthetic
                                        sources tagged with <BT>); --train_weight upsamples the main corpus
    --source_lang de --target_lang en   the reverse direction (with --tokenizer_name for the same joint vocabulary)
    --case_augmentation 0.3             that share of pairs added again with the source upper- or lower-cased
    --average_last 10                   at the end, average the last n checkpoints (n = 1, 2, 5, 10), score each on
                                        validation, ship the best
    --model_name_or_path FOLDER_OR_ID   fine-tune a trained model of this project (its weights, architecture and
                                        tokenizer) instead of starting from random weights

Data from the Hub or from `datasets` files instead of text files:

    --dataset_name wmt14 --dataset_config_name de-en   a Hub dataset (or a local dataset folder), splits
                                                       train/validation/test
    --streaming --max_steps 100000                     read the training split as a stream (corpora larger than memory),
                                                       the BPE trained on its first --tokenizer_train_samples pairs

Several processes (one per GPU; gloo on CPU): `torchrun --nproc_per_node N train.py ...` or
`accelerate launch --multi_gpu --num_processes N train.py ...`. The main process trains the tokenizer and writes every
file; the others wait for it and load the tokenizer it saved. Validation during training is scored through the
translation engine on the main process (every real sentence once), so it is the same score a single process gives the
same checkpoint.

At the end, on the main process: the chosen model is saved, scored on validation and test through the translation
engine with its own decoding (every sentence in file order), and eval_results.json and the card are written.
"""

import dataclasses
import json
import os
import random
import re
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from accelerate.utils import broadcast_object_list
from datasets import Dataset
from huggingface_hub import constants
from transformers import (
    DataCollatorForSeq2Seq,
    HfArgumentParser,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
    TrainerCallback,
    set_seed,
)

from modeling import TransformerMTConfig, TransformerMTForConditionalGeneration
from modeling.modeling_transformer_mt import label_smoothed_cross_entropy
from tokenizer import config_token_fields, load_tokenizer, train_tokenizer
from transformer_en_de import data, precision
from transformer_en_de.checkpoints import (
    choose_average,
    complete_checkpoints,
    decoding_record,
    restore_translation_defaults,
    score_model,
    validation_curve,
)
from transformer_en_de.evaluation import read_eval_results, write_eval_results
from transformer_en_de.hub import PublishError, hub_is_reachable, model_folder, push_folder
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
    "--train_sampling_strategy", "group_by_length",
    "--per_device_train_batch_size", "128",
    "--per_device_eval_batch_size", "128",
    "--ddp_find_unused_parameters", "false",  # every parameter takes part in every step
    "--num_train_epochs", "20",
    "--eval_strategy", "epoch",
    "--save_strategy", "epoch",
    "--save_total_limit", "2",
    "--load_best_model_at_end", "true",
    "--metric_for_best_model", "bleu",
    "--greater_is_better", "true",
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
# What fine-tuning may change in a trained model; the rest of its architecture is its weights' shape.
REGULARISATION_FIELDS = ("dropout", "attention_dropout", "activation_dropout", "label_smoothing")


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
    dataset_name: str | None = field(
        default=None,
        metadata={
            "help": "A `datasets` dataset instead of text files: a Hub id (e.g. wmt14), a local folder of data files "
            "(train.jsonl, validation.parquet, ...) or of save_to_disk. Rows {'translation': {lang: text}} or a column "
            "per language."
        },
    )
    dataset_config_name: str | None = field(default=None, metadata={"help": "The dataset's configuration (de-en)."})
    streaming: bool = field(
        default=False,
        metadata={
            "help": "Stream the training split of --dataset_name (tokenized on the fly, never held in memory); needs "
            "--max_steps. Evaluation and checkpoints then default to every --save_steps steps."
        },
    )
    source_lang: str = field(default="en", metadata={"help": "Source language suffix (de with --target_lang en)."})
    target_lang: str = field(default="de")
    train_split: str = field(default="train")
    validation_split: str | None = field(
        default=None, metadata={"help": "Default: val (text files), validation (--dataset_name)."}
    )
    test_split: str | None = field(
        default=None,
        metadata={"help": "Scored once at the end; '' to skip. Default: test_2016_flickr (files), test (datasets)."},
    )
    max_source_length: int = field(default=128, metadata={"help": "Longer sources are truncated (tokens)."})
    max_target_length: int = field(default=128, metadata={"help": "Longer targets are truncated (tokens)."})
    max_train_samples: int | None = field(
        default=None, metadata={"help": "Use only the first N pairs of each training corpus."}
    )
    max_eval_samples: int | None = field(default=None, metadata={"help": "Use only the first N validation pairs."})
    max_test_samples: int | None = field(default=None, metadata={"help": "Use only the first N test pairs."})
    train_weight: float = field(
        default=1.0, metadata={"help": "Times the main training split is seen per epoch (e.g. 2 with --extra_train)."}
    )
    extra_train: list[str] = field(
        default_factory=list,
        metadata={
            "help": "More training corpora, each PREFIX[:WEIGHT][:tagged]: the files PREFIX.{source_lang} and "
            "PREFIX.{target_lang}, seen WEIGHT times per epoch (0.5: a random half), 'tagged' for synthetic sources "
            "(back-translations), which get --tag_token in front."
        },
    )
    tag_token: str = field(
        default="<BT>", metadata={"help": "Reserved token in front of tagged sources (a special token, never split)."}
    )
    case_augmentation: float = field(
        default=0.0,
        metadata={
            "help": "Share of training pairs added again with the source all upper-case or all lower-case and the "
            "target as written, so that all-caps or lower-case input translates like normal text. E.g. 0.3."
        },
    )


@dataclass
class TokenizerArguments:
    tokenizer_name: str | None = field(
        default=None, metadata={"help": "An existing tokenizer folder; default: train one on the training corpora."}
    )
    vocab_size: int = field(default=8000, metadata={"help": "BPE vocabulary size when training a tokenizer."})
    bpe_min_frequency: int = field(default=2, metadata={"help": "Minimum pair frequency for a BPE merge."})
    tokenizer_train_samples: int = field(
        default=1_000_000,
        metadata={
            "help": "Train the BPE on at most this many training pairs: the first ones of a stream, a seeded random "
            "sample otherwise."
        },
    )


@dataclass
class StartArguments:
    model_name_or_path: str | None = field(
        default=None,
        metadata={
            "help": "Fine-tune: start from this trained model of the project (a folder or a Hub id) instead of random "
            "weights. Its architecture and tokenizer come with it; of the model flags only the regularisation ones ("
            + ", ".join(f"--{name}" for name in REGULARISATION_FIELDS) + ") may change. A tag token new to its "
            "tokenizer gets a new embedding."
        },
    )
    # Where its files are on this machine (the folder itself, or the Hub download): set by parse_arguments.
    folder: str | None = field(default=None, init=False)


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


def given(argv: list[str], flag: str) -> bool:
    """Whether `flag` is on the command line (`--flag value` or `--flag=value`)."""
    return any(arg == flag or arg.startswith(flag + "=") for arg in argv)


def parse_arguments(argv: list[str]):
    parser = HfArgumentParser(
        (DataArguments, TokenizerArguments, ModelArguments, StartArguments, SelectionArguments,
         Seq2SeqTrainingArguments)
    )
    # bf16 autocast needs `use_cpu` to be said explicitly where there is no GPU.
    device_defaults = [] if torch.cuda.is_available() else ["--use_cpu", "true"]
    if not (given(argv, "--bf16") or given(argv, "--fp16")):
        # bf16 autocast where the hardware has it, float32 where it would be emulated (33x slower on an AVX2 CPU).
        device_defaults += ["--bf16", str(precision.native_bf16(use_cpu=not torch.cuda.is_available())).lower()]
    data_args, *_, first_pass = parser.parse_args_into_dataclasses(args=RECIPE_DEFAULTS + device_defaults + argv)
    if data_args.streaming:
        # A stream has no epochs to count: evaluate and save every --save_steps steps unless told otherwise.
        device_defaults += ["--eval_strategy", "steps", "--save_strategy", "steps",
                            "--eval_steps", str(first_pass.save_steps)]
    data_args, tokenizer_args, model_args, start_args, selection_args, training_args = (
        parser.parse_args_into_dataclasses(args=RECIPE_DEFAULTS + device_defaults + argv)
    )
    check_data_arguments(data_args, training_args)
    if start_args.model_name_or_path:
        resolve_starting_model(start_args, tokenizer_args, model_args, argv)
    if data_args.streaming and not given(argv, "--accelerator_config"):
        # Each process reads the stream itself (its own files where there are enough, else its share of each batch)
        # and pads its own batches: the main process cannot hand out slices of batches padded to different lengths.
        training_args.accelerator_config.dispatch_batches = False
    if "--learning_rate" not in " ".join(argv):
        # The paper's peak rate: d_model^-0.5 * warmup^-0.5, reached at the end of the linear warm-up.
        training_args.learning_rate = model_args.d_model**-0.5 * max(training_args.warmup_steps, 1) ** -0.5
    if training_args.include_num_input_tokens_seen == "no":
        # Logs tokens seen and tokens per second (real source tokens, padding excluded).
        training_args.include_num_input_tokens_seen = "non_padding"
    if selection_args.average_last < 0:
        raise SystemExit(f"error: --average_last {selection_args.average_last}: give a number of checkpoints (>= 1).")
    if selection_args.average_last and training_args.save_total_limit:
        # The last N checkpoints, and the best one besides them (the Trainer never deletes the best).
        training_args.save_total_limit = max(training_args.save_total_limit, selection_args.average_last + 1)
    return data_args, tokenizer_args, model_args, start_args, selection_args, training_args


def resolve_starting_model(start_args: StartArguments, tokenizer_args: TokenizerArguments, model_args,
                           argv: list[str]) -> None:
    """Fine-tuning: find the model's folder (downloading a Hub id) and take its architecture into `model_args` and
    its tokenizer into `tokenizer_args`, refusing architecture flags that its weights could not follow."""
    fixed = [f"--{name}" for name in ARCHITECTURE_FIELDS
             if name not in REGULARISATION_FIELDS and given(argv, f"--{name}")]
    if fixed:
        raise SystemExit(
            f"error: {' '.join(fixed)} cannot change a trained model: --model_name_or_path "
            f"{start_args.model_name_or_path} brings its own architecture. Drop the flag, or train from scratch."
        )
    try:
        folder = model_folder(start_args.model_name_or_path)
        config = TransformerMTConfig.from_pretrained(folder)
    except (RuntimeError, OSError, ValueError) as error:
        raise SystemExit(f"error: --model_name_or_path {start_args.model_name_or_path}: {error}") from None
    start_args.folder = str(folder)
    for name in ARCHITECTURE_FIELDS:
        if not (name in REGULARISATION_FIELDS and given(argv, f"--{name}")):
            setattr(model_args, name, getattr(config, name))
    if not tokenizer_args.tokenizer_name:
        tokenizer_args.tokenizer_name = str(folder)


def load_starting_model(folder: str, tokenizer, model_args, tag_token: str | None):
    """The trained model to fine-tune, with this run's regularisation, and one embedding more when the run's tokenizer
    added the tag token (initialised near the mean of the others, so the first steps are not thrown off)."""
    regularisation = {name: getattr(model_args, name) for name in REGULARISATION_FIELDS}
    model = TransformerMTForConditionalGeneration.from_pretrained(folder, **regularisation)  # overrides its config
    config = model.config
    added = len(tokenizer) - config.vocab_size
    tag_is_new = tag_token is not None and tokenizer.convert_tokens_to_ids(tag_token) == config.vocab_size
    if added and not (added == 1 and tag_is_new):
        raise SystemExit(
            f"error: the tokenizer has {len(tokenizer)} tokens but the model in {folder} has {config.vocab_size} "
            "embeddings: fine-tune with the model's own tokenizer (leave out --tokenizer_name)."
        )
    if added:
        model.resize_token_embeddings(len(tokenizer))
        print(f"[model] embedding {config.vocab_size} added for {tag_token}")
    return model


def check_data_arguments(data_args: DataArguments, training_args) -> None:
    """Where the data comes from, and what each source allows: checked before anything is loaded or trained."""
    from_dataset = data_args.dataset_name is not None
    if from_dataset and data_args.data_dir:
        raise SystemExit("error: give either --data_dir (text files) or --dataset_name (a datasets dataset), not both.")
    if data_args.streaming and not from_dataset:
        raise SystemExit("error: --streaming reads a --dataset_name; text files (--data_dir) are read in memory.")
    if data_args.streaming and training_args.max_steps <= 0:
        raise SystemExit(
            "error: --streaming needs --max_steps N: a stream has no length, so epochs cannot be counted."
        )
    if from_dataset:
        unsupported = [flag for flag, used in (("--extra_train", data_args.extra_train),
                                               ("--case_augmentation", data_args.case_augmentation),
                                               ("--train_weight", data_args.train_weight != 1)) if used]
        if unsupported:
            raise SystemExit(
                f"error: {', '.join(unsupported)} mix text-file corpora; with --dataset_name they are not supported. "
                "Write the dataset to {split}.{lang} text files and use --data_dir."
            )
    if data_args.validation_split is None:
        data_args.validation_split = "validation" if from_dataset else "val"
    if data_args.test_split is None:
        data_args.test_split = "test" if from_dataset else "test_2016_flickr"


def load_split(data_dir: Path, split: str, data_args: DataArguments, limit: int | None, clean: bool):
    paths = data.split_paths(data_dir, split, data_args.source_lang, data_args.target_lang)
    return load_pairs(paths, split, limit, clean)


def load_pairs(paths: tuple[Path, Path], name: str, limit: int | None, clean: bool):
    sources, targets = data.read_parallel(*paths)
    if clean:
        total = len(sources)
        sources, targets, dropped = data.clean_pairs(sources, targets)
        reasons = ", ".join(f"{count} {reason}" for reason, count in dropped.items()) or "none"
        if not sources:
            raise data.DataError(
                f"{paths[0]} / {paths[1]}: all {total} pairs were dropped by cleaning ({reasons}); nothing is left to "
                "train on. Check that the files are the intended text files, one sentence per line."
            )
        print(f"[data] {name}: kept {len(sources)} pairs, dropped {sum(dropped.values())} ({reasons})")
    else:
        print(f"[data] {name}: {len(sources)} pairs (kept as they are, so scores stay comparable)")
    if limit is not None:
        sources, targets = sources[:limit], targets[:limit]
    return sources, targets


@dataclass
class TrainingPairs:
    """The training set as the model sees it: every corpus weighted, tagged where synthetic, case variants added."""

    sources: list[str]
    targets: list[str]
    tagged: list[bool]
    corpora: list[data.Corpus]
    tokenizer_texts: list[str]  # each corpus once, and the case variants: what a new BPE is trained on


@dataclass
class DatasetTraining:
    """The training split of --dataset_name: `source`/`target` columns, cleaned lazily (in memory or streamed)."""

    dataset: object  # datasets.Dataset or datasets.IterableDataset
    facts: dict  # what eval_results.json keeps about the corpus
    tokenizer_texts: object  # () -> list[str]: the BPE's training texts, read only by the process that trains it


def load_dataset_training(data_args: DataArguments, tokenizer_args: TokenizerArguments, training_args,
                          ) -> DatasetTraining:
    """The training split of --dataset_name, each pair cleaned like a text corpus; a stream is shuffled in a buffer."""
    name, streaming = data_args.dataset_name, data_args.streaming
    languages = {"source_lang": data_args.source_lang, "target_lang": data_args.target_lang}
    # The main process downloads and caches first; the others then read its cache.
    with training_args.main_process_first(local=training_args.save_on_each_node, desc="loading the dataset"):
        dataset = data.load_translation_split(name, data_args.dataset_config_name, data_args.train_split, streaming)
        if streaming:
            if data_args.max_train_samples is not None:
                dataset = dataset.take(data_args.max_train_samples)
            columns = dataset.column_names or list(next(iter(dataset)))
            dataset = dataset.map(data.clean_batch, batched=True, fn_kwargs=languages, remove_columns=columns)
            dataset = dataset.shuffle(seed=training_args.seed, buffer_size=10_000)
            print(f"[data] {name} {data_args.train_split}: streamed, cleaned on the fly")
        else:
            total = len(dataset)
            if data_args.max_train_samples is not None:
                dataset = dataset.select(range(min(data_args.max_train_samples, total)))
            dataset = dataset.map(data.clean_batch, batched=True, fn_kwargs=languages,
                                  remove_columns=dataset.column_names, desc="cleaning")
            if len(dataset) == 0:
                raise data.DataError(f"{name} {data_args.train_split}: all pairs were dropped by cleaning.")
            print(f"[data] {name} {data_args.train_split}: kept {len(dataset)} pairs of {total}")
    samples = tokenizer_args.tokenizer_train_samples

    def tokenizer_texts() -> list[str]:
        if streaming:
            sample = list(dataset.take(samples))
            sources, targets = [row["source"] for row in sample], [row["target"] for row in sample]
        else:
            sample = dataset
            if len(dataset) > samples:
                sample = dataset.shuffle(seed=training_args.seed).select(range(samples))
            sources, targets = sample["source"], sample["target"]
        print(f"[tokenizer] training on {len(sources)} pairs of {name}")
        return list(sources) + list(targets)

    facts = {"name": name, "config": data_args.dataset_config_name, "split": data_args.train_split,
             "pairs": None if streaming else len(dataset), "weight": 1.0, "tag": None, "streaming": streaming}
    return DatasetTraining(dataset, facts, tokenizer_texts)


def load_dataset_split(data_args: DataArguments, split: str, limit: int | None, training_args):
    """A validation or test split of --dataset_name as (sources, targets), every pair as it is, in dataset order."""
    with training_args.main_process_first(local=training_args.save_on_each_node, desc=f"loading {split}"):
        dataset = data.load_translation_split(
            data_args.dataset_name, data_args.dataset_config_name, split, data_args.streaming
        )
        sources, targets = data.dataset_pairs(dataset, data_args.source_lang, data_args.target_lang, limit)
    print(f"[data] {data_args.dataset_name} {split}: {len(sources)} pairs (kept as they are)")
    return sources, targets


def load_training_pairs(data_dir: Path, data_args: DataArguments, seed: int) -> TrainingPairs:
    main_corpus = data.Corpus(prefix=str(data_dir / data_args.train_split), weight=data_args.train_weight)
    if not data_args.train_weight > 0:
        raise data.DataError(f"--train_weight {data_args.train_weight}: the weight must be above 0.")
    corpora = [main_corpus] + [data.parse_corpus(spec) for spec in data_args.extra_train]
    for corpus in corpora:
        paths = (Path(f"{corpus.prefix}.{data_args.source_lang}"), Path(f"{corpus.prefix}.{data_args.target_lang}"))
        name = data_args.train_split if corpus is main_corpus else corpus.prefix
        corpus.sources, corpus.targets = load_pairs(paths, name, data_args.max_train_samples, clean=True)
    sources, targets, tagged = data.mix_corpora(corpora, seed)
    texts = [text for corpus in corpora for text in corpus.sources + corpus.targets]
    if data_args.case_augmentation:
        variants = data.case_variants(sources, targets, data_args.case_augmentation, seed)
        for index, source, target in variants:
            sources.append(source)
            targets.append(target)
            tagged.append(tagged[index])
            texts += [source, target]
        print(f"[data] case augmentation: {len(variants)} pairs added with the source upper- or lower-cased")
    if len(corpora) > 1 or data_args.train_weight != 1:
        mix = ", ".join(f"{corpus.prefix} x{corpus.weight}{' tagged' if corpus.tagged else ''}" for corpus in corpora)
        print(f"[data] training mix: {len(sources)} pairs per epoch ({mix})")
    return TrainingPairs(sources, targets, tagged, corpora, texts)


def prepare_tokenizer(tokenizer_args: TokenizerArguments, output_dir: Path, texts, max_len: int,
                      tag_token: str | None = None):
    """The tokenizer of this run: given, or already in the output folder (a resumed run), or trained now.

    `texts`: the training texts, or a function that reads them (called only when a tokenizer is trained). With
    `tag_token`, the tag is added as a special token (one id, never split, dropped when decoding).
    """
    if tokenizer_args.tokenizer_name:
        tokenizer = load_tokenizer(tokenizer_args.tokenizer_name)
    elif (output_dir / "tokenizer.json").is_file():
        tokenizer = load_tokenizer(output_dir)
        trained_size = tokenizer.backend_tokenizer.get_vocab_size(with_added_tokens=False)
        if trained_size != tokenizer_args.vocab_size:
            raise SystemExit(
                f"error: {output_dir / 'tokenizer.json'} has a {trained_size}-token vocabulary but --vocab_size is "
                f"{tokenizer_args.vocab_size}. To continue that run pass --vocab_size {trained_size}; to train a new "
                "tokenizer use a new --output_dir (or delete the tokenizer files there)."
            )
        print(f"[tokenizer] reusing {output_dir / 'tokenizer.json'}")
    else:
        started = time.time()
        texts = texts() if callable(texts) else texts
        if len(texts) > 2 * tokenizer_args.tokenizer_train_samples:
            texts = random.Random(0).sample(texts, 2 * tokenizer_args.tokenizer_train_samples)
        tokenizer = train_tokenizer(
            texts=texts,
            vocab_size=tokenizer_args.vocab_size,
            min_frequency=tokenizer_args.bpe_min_frequency,
            model_max_length=max_len,
        )
        print(f"[tokenizer] trained a {len(tokenizer)}-token joint BPE in {time.time() - started:.1f}s")
    if tag_token and tag_token not in tokenizer.all_special_tokens:
        # Appended after the existing ids, so a given tokenizer keeps every id it had.
        tokenizer.add_special_tokens({"additional_special_tokens": [tag_token]}, replace_extra_special_tokens=False)
        print(f"[tokenizer] {tag_token} added as special token {tokenizer.convert_tokens_to_ids(tag_token)}")
    output_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(output_dir)  # saved at once, so a resumed run uses the very same vocabulary
    return tokenizer


def tokenize(tokenizer, sources, targets, data_args: DataArguments, tagged: list[bool] | None = None) -> Dataset:
    return Dataset.from_dict(encode_pairs(tokenizer, sources, targets, data_args, tagged))


def tokenize_dataset(tokenizer, dataset, data_args: DataArguments, training_args):
    """The `source`/`target` dataset tokenized like `tokenize` (lazily, batch by batch, when streamed)."""

    def encode(batch):
        return encode_pairs(tokenizer, batch["source"], batch["target"], data_args)

    if data_args.streaming:
        return dataset.map(encode, batched=True, remove_columns=["source", "target"])
    with training_args.main_process_first(local=training_args.save_on_each_node, desc="tokenizing"):
        return dataset.map(encode, batched=True, remove_columns=["source", "target"], desc="tokenizing")


def encode_pairs(tokenizer, sources, targets, data_args: DataArguments, tagged: list[bool] | None = None) -> dict:
    """input_ids, attention_mask, labels and length of each pair: sources and labels truncated, </s> kept."""
    encoded = tokenizer(
        sources,
        text_target=targets,
        max_length=data_args.max_source_length,
        truncation=True,
    )

    def truncated(ids: list[int], limit: int) -> list[int]:
        return ids if len(ids) <= limit else ids[: limit - 1] + [ids[-1]]  # keep the final </s>

    input_ids = encoded["input_ids"]
    if tagged is not None and any(tagged):
        # The tag goes in front of the source's own tokens: the sentence is tokenized exactly as when untagged.
        tag_id = tokenizer.convert_tokens_to_ids(data_args.tag_token)
        input_ids = [truncated([tag_id] + ids, data_args.max_source_length) if tag else ids
                     for ids, tag in zip(input_ids, tagged, strict=True)]
    # Labels can be longer than sources; truncate them to their own limit, keeping the final </s>.
    labels = [truncated(ids, data_args.max_target_length) for ids in encoded["labels"]]
    return {
        "input_ids": input_ids,
        "attention_mask": [[1] * len(ids) for ids in input_ids],
        "labels": labels,
        "length": [len(ids) for ids in input_ids],
    }


def training_loss(model):
    """The Trainer's loss: label-smoothed cross-entropy while training (the config's epsilon, section 5.4), the plain
    cross-entropy in evaluation (the model's own loss, comparable across models)."""

    def loss(outputs, labels, num_items_in_batch=None):
        epsilon = model.config.label_smoothing if model.training else 0.0
        return label_smoothed_cross_entropy(outputs.logits, labels, epsilon, num_items_in_batch)

    return loss


class StartingStep(TrainerCallback):
    """Remembers the step this process started training at: 0, or the step of the checkpoint it resumed."""

    step = 0

    def on_train_begin(self, args, state, control, **kwargs):
        self.step = state.global_step
        if self.step:
            print(f"[train] resumed at step {self.step} of {state.max_steps}")


class TranslationTrainer(Seq2SeqTrainer):
    """Seq2SeqTrainer whose evaluation adds BLEU and chrF of the validation sentences, translated through the engine
    with the model's own decoding on the main process: every real sentence once, in file order, however many
    processes train. (A distributed generate-and-gather would pad the last batch with repeated sentences and decode
    each shard in other batches.) The other processes wait for the scores, so every process chooses the same best
    checkpoint."""

    def __init__(self, *args, validation: tuple[list[str], list[str]], **kwargs):
        super().__init__(*args, **kwargs)
        self.validation = validation

    def evaluation_loop(self, dataloader, description, prediction_loss_only=None, ignore_keys=None,
                        metric_key_prefix="eval"):
        output = super().evaluation_loop(dataloader, description, prediction_loss_only, ignore_keys, metric_key_prefix)
        scores = [None]
        if self.is_world_process_zero():
            _, split_scores = score_model(self.model, self.processing_class, *self.validation)
            scores = [{name: split_scores[name] for name in ("bleu", "chrf", "num_sentences")}]
        if self.args.world_size > 1:
            broadcast_object_list(scores)
        output.metrics.update({f"{metric_key_prefix}_{name}": value for name, value in scores[0].items()})
        return output


def resolve_resume(value: str | None, output_dir: str) -> str | bool | None:
    """`--resume_from_checkpoint last` (or true) continues from the newest complete checkpoint in the output folder."""
    if value is None or value.lower() in ("", "false", "no"):
        return None
    if value.lower() in ("last", "true", "yes"):
        checkpoints = complete_checkpoints(output_dir)  # a checkpoint cut off while saving has no trainer_state.json
        if not checkpoints:
            raise SystemExit(
                f"error: --resume_from_checkpoint {value}: no complete checkpoint-* folder in {output_dir}."
            )
        return str(checkpoints[-1])
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


def check_push(training_args) -> None:
    """Fail before training, not after it, when the finished folder could not be pushed."""
    if not training_args.hub_model_id:
        raise SystemExit("error: --push_to_hub needs --hub_model_id NAME (user/model).")
    if constants.is_offline_mode():
        raise SystemExit(
            "error: --push_to_hub with offline mode on (HF_HUB_OFFLINE=1): unset it on a machine with network access, "
            "or train without --push_to_hub and push the folder later (python publish.py)."
        )
    if not hub_is_reachable():
        raise SystemExit(
            f"error: --push_to_hub: {constants.ENDPOINT} is unreachable. Check the network, or train without "
            "--push_to_hub and push the folder later (python publish.py)."
        )


def dataset_facts(data_args: DataArguments) -> dict:
    """The dataset a run trained on, named as the Hub names it (the card links it)."""
    if data_args.dataset_name:
        return {"name": data_args.dataset_name, "config": data_args.dataset_config_name,
                "validation_split": data_args.validation_split, "test_split": data_args.test_split or None}
    # Text files: Multi30k (downloaded, or a local copy with its split names), on the Hub as bentrevett/multi30k.
    return {"name": data.MULTI30K_HUB_ID, "config": None, "files": data_args.data_dir or "downloaded",
            "validation_split": data_args.validation_split, "test_split": data_args.test_split or None}


def main(argv: list[str] | None = None) -> dict:
    argv = sys.argv[1:] if argv is None else argv
    data_args, tokenizer_args, model_args, start_args, selection_args, training_args = parse_arguments(argv)
    set_seed(training_args.seed)
    output_dir = Path(training_args.output_dir)
    resume = resolve_resume(training_args.resume_from_checkpoint, training_args.output_dir)
    # We push the finished folder ourselves (after the test score and the card exist), not the Trainer's checkpoints.
    push_requested, training_args.push_to_hub = training_args.push_to_hub, False
    if push_requested:
        check_push(training_args)

    test_sources = test_targets = None
    try:
        if data_args.dataset_name:
            training = load_dataset_training(data_args, tokenizer_args, training_args)
            val_sources, val_targets = load_dataset_split(
                data_args, data_args.validation_split, data_args.max_eval_samples, training_args
            )
            if data_args.test_split:
                test_sources, test_targets = load_dataset_split(
                    data_args, data_args.test_split, data_args.max_test_samples, training_args
                )
        else:
            data_dir = Path(data_args.data_dir) if data_args.data_dir else data.download_multi30k()
            training = load_training_pairs(data_dir, data_args, training_args.seed)
            val_sources, val_targets = load_split(
                data_dir, data_args.validation_split, data_args, data_args.max_eval_samples, clean=False
            )
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
    from_files = isinstance(training, TrainingPairs)
    tag_token = data_args.tag_token if from_files and any(corpus.tagged for corpus in training.corpora) else None
    # One process trains (or loads) the tokenizer and saves it; the others wait, then load what it saved.
    with training_args.main_process_first(local=training_args.save_on_each_node, desc="the tokenizer"):
        if training_args.should_save:
            tokenizer = prepare_tokenizer(
                tokenizer_args, output_dir, training.tokenizer_texts, max_positions, tag_token
            )
        else:
            tokenizer = load_tokenizer(output_dir)

    if start_args.model_name_or_path:
        model = load_starting_model(start_args.folder, tokenizer, model_args, tag_token)
    else:
        config = TransformerMTConfig(**config_token_fields(tokenizer), **dataclasses.asdict(model_args))
        model = TransformerMTForConditionalGeneration(config)
        restore_translation_defaults(model)  # validation decodes as the shipped folder will: beam 4, the length bound
    num_parameters = model.num_parameters()
    print(f"[model] {num_parameters:,} parameters: {json.dumps(dataclasses.asdict(model_args))}")
    chosen = "bf16 autocast" if training_args.bf16 else "fp16 autocast" if training_args.fp16 else "float32"
    print(f"[precision] {chosen} ({precision.describe(training_args.use_cpu)})")
    training_args.generation_max_length = data_args.max_target_length

    if from_files:
        train_dataset = tokenize(tokenizer, training.sources, training.targets, data_args, training.tagged)
    else:
        train_dataset = tokenize_dataset(tokenizer, training.dataset, data_args, training_args)
    eval_dataset = tokenize(tokenizer, val_sources, val_targets, data_args)  # for the validation loss
    trainer = TranslationTrainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100),
        processing_class=tokenizer,
        callbacks=[starting_step := StartingStep()],
        compute_loss_func=training_loss(model),
        validation=(val_sources, val_targets),
    )
    started = time.time()
    train_result = trainer.train(resume_from_checkpoint=resume)
    print(f"[train] done in {(time.time() - started) / 60:.1f} min: {train_result.metrics}")
    if not trainer.is_world_process_zero():
        return {}  # one process chooses, scores, saves and pushes

    # Choose the model to ship: the best checkpoint by validation BLEU (loaded the way users load it), or with
    # --average_last the best of the averages of the last checkpoints, chosen on validation through the engine.
    best = trainer.state.best_model_checkpoint
    facts = {
        "validation_split": data_args.validation_split,
        "validation_curve": validation_curve(trainer.state.log_history),
        "trained_steps": {"from": starting_step.step, "to": trainer.state.global_step},
        "best_checkpoint": Path(best).name if best else None,
        "corpora": ([corpus.facts(data_args.tag_token) for corpus in training.corpora] if from_files
                    else [training.facts]),
        "dataset": dataset_facts(data_args),
    }
    if start_args.model_name_or_path:
        facts["fine_tuned_from"] = start_args.model_name_or_path
    if data_args.case_augmentation:
        facts["case_augmentation"] = data_args.case_augmentation
    if tag_token:
        facts["tag_token"] = tag_token
    val_scores = None
    if selection_args.average_last:
        choice = choose_average(
            output_dir, selection_args.average_last, tokenizer, val_sources, val_targets,
            extra={"best": [Path(best)]} if best else None,
        )
        model, val_scores = choice.model, choice.scores
        facts.update(average_candidates=choice.candidates, chosen_average=choice.name,
                     averaged_checkpoints=[path.name for path in choice.checkpoints])
        print(f"[average] shipping {choice.name}: val {val_scores['bleu']} BLEU")
    elif best:
        model = TransformerMTForConditionalGeneration.from_pretrained(best)
    else:
        model = trainer.model
    restore_translation_defaults(model)  # the Trainer's evaluation rewrote the generation config; the cache is on
    model.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)

    # Score exactly what a user downloads, with its own decoding: every real sentence, in file order.
    if val_scores is None:
        _, val_scores = score_model(model, tokenizer, val_sources, val_targets)
    scores = {data_args.validation_split: val_scores}
    if test_sources is not None:
        hypotheses, scores[data_args.test_split] = score_model(model, tokenizer, test_sources, test_targets)
        (output_dir / f"translations.{data_args.test_split}.{data_args.target_lang}").write_text(
            "\n".join(hypotheses) + "\n", encoding="utf-8"
        )
    for split, score in scores.items():
        print(f"[score] {split}: {score['bleu']} BLEU / {score['chrf']} chrF ({score['num_sentences']} sentences)")
    write_eval_results(
        output_dir,
        num_parameters=num_parameters,
        languages=(data_args.source_lang, data_args.target_lang),
        decoding=decoding_record(model),
        scores=scores,
        command=["python train.py " + shlex.join(without_resume_flag(argv))],
        training=facts,
    )
    write_model_card(output_dir, config=model.config, hub_model_id=training_args.hub_model_id)
    print(f"[save] Hub-ready folder: {output_dir}")

    if push_requested:
        try:
            url = push_folder(
                output_dir, training_args.hub_model_id, token=training_args.hub_token, ignore_patterns=["checkpoint-*"]
            )
        except PublishError as error:
            raise SystemExit(f"error: {error}") from None
        print(f"[push] {url}")
    return read_eval_results(output_dir)


if __name__ == "__main__":
    main()
