"""The data of a training run (train.py): the training set, the validation and test splits, the tokenizer, and the
tokenized datasets the Trainer reads.

`check_data_arguments` checks where the data comes from before anything is loaded; `load_splits` loads all of it. Two
loaders, each for text files (`--data_dir`) and for a `datasets` dataset (`--dataset_name`) alike:

- `load_training_set`: every training corpus, cleaned and weighted (`TextTrainingSet`), or the dataset's training
  split cleaned lazily, in memory or streamed (`DatasetTrainingSet`);
- `load_split`: a validation or test split as (sources, targets), every pair as it is, in file order.

`DataArguments` and `TokenizerArguments` are train.py's data and tokenizer flags (`data_args` below).
"""

import random
import time
from dataclasses import dataclass, field
from pathlib import Path

from datasets import Dataset, concatenate_datasets

from tokenizer import load_tokenizer, train_tokenizer

from .. import data
from .prepared_mix import PreparedMix


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
    target_lang: str = field(default="de", metadata={"help": "Target language suffix."})
    train_split: str = field(default="train", metadata={"help": "The training split's name."})
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

    def __post_init__(self):
        # The split names of the two sources: Multi30k's files, and the Hub's convention.
        if self.validation_split is None:
            self.validation_split = "validation" if self.dataset_name else "val"
        if self.test_split is None:
            self.test_split = "test" if self.dataset_name else "test_2016_flickr"


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
class TextTrainingSet:
    """The training set as the model sees it: every corpus weighted, tagged where synthetic, case variants added."""

    sources: list[str]
    targets: list[str]
    tagged: list[bool]
    corpora: list[data.Corpus]
    tokenizer_texts: list[str]  # each corpus once, and the case variants: what a new BPE is trained on
    # The same mix tokenized by an earlier start of the run (`PreparedMix`): read instead of the texts above.
    prepared: Dataset | None = None
    cache: "PreparedMix | None" = field(default=None, repr=False)
    known_facts: list[dict] | None = None  # the corpora's facts, as the earlier start counted them

    def facts(self, tag_token: str) -> list[dict]:
        if self.known_facts is not None:
            return self.known_facts
        return [corpus.facts(tag_token) for corpus in self.corpora]

    @property
    def has_tagged(self) -> bool:
        return any(corpus.tagged for corpus in self.corpora)


@dataclass
class DatasetTrainingSet:
    """The training split of --dataset_name: `source`/`target` columns, cleaned lazily (in memory or streamed)."""

    dataset: object  # datasets.Dataset or datasets.IterableDataset
    corpus: dict  # what eval_results.json keeps about the corpus
    tokenizer_texts: object  # () -> list[str]: the BPE's training texts, read only by the process that trains it

    def facts(self, tag_token: str) -> list[dict]:
        return [self.corpus]

    has_tagged = False


def check_data_arguments(data_args, training_args) -> None:
    """Where the data comes from, and what each source allows: checked before anything is loaded or trained."""
    from_dataset = data_args.dataset_name is not None
    if from_dataset and data_args.data_dir:
        raise SystemExit("error: give either --data_dir (text files) or --dataset_name (a datasets dataset), not both.")
    if data_args.streaming and not from_dataset:
        raise SystemExit("error: --streaming reads a --dataset_name; text files (--data_dir) are read in memory.")
    if data_args.streaming and training_args.max_steps <= 0:
        raise SystemExit("error: --streaming needs --max_steps N: a stream has no length, so epochs cannot be counted.")
    if data_args.streaming and training_args.max_tokens:
        raise SystemExit("error: --max_tokens sorts the training set by length; a stream (--streaming) cannot be.")
    if from_dataset:
        unsupported = [
            flag
            for flag, used in (
                ("--extra_train", data_args.extra_train),
                ("--case_augmentation", data_args.case_augmentation),
                ("--train_weight", data_args.train_weight != 1),
            )
            if used
        ]
        if unsupported:
            raise SystemExit(
                f"error: {', '.join(unsupported)} mix text-file corpora; with --dataset_name they are not supported. "
                "Write the dataset to {split}.{lang} text files and use --data_dir."
            )


def check_lengths(data_args, max_positions: int) -> None:
    """Sources and targets are cut to lengths the model's positions hold."""
    if max(data_args.max_source_length, data_args.max_target_length) > max_positions:
        raise SystemExit(
            f"error: max_source_length/max_target_length ({data_args.max_source_length}/"
            f"{data_args.max_target_length}) exceed max_position_embeddings ({max_positions})."
        )


def load_splits(data_args, training_args, tokenizer_args):
    """(training set, validation pairs, test pairs or None without a test split), from --data_dir (Multi30k downloaded
    into a cache when it is not given) or --dataset_name; a data problem is one line."""
    try:
        data_dir = None
        if not data_args.dataset_name:
            data_dir = Path(data_args.data_dir) if data_args.data_dir else data.download_multi30k()
        training_set = load_training_set(
            data_args,
            data_dir,
            training_args,
            tokenizer_args.tokenizer_train_samples,
            mix_tokenizer_file(tokenizer_args, Path(training_args.output_dir)),
        )
        validation = load_split(
            data_args, data_dir, data_args.validation_split, data_args.max_eval_samples, training_args
        )
        test = None
        if data_args.test_split:
            test = load_split(data_args, data_dir, data_args.test_split, data_args.max_test_samples, training_args)
    except data.DataError as error:
        raise SystemExit(f"error: {error}") from None
    return training_set, validation, test


def load_training_set(
    data_args, data_dir: Path | None, training_args, tokenizer_train_samples: int, tokenizer_file: Path | None = None
):
    """The training set: text corpora from `data_dir` (kept tokenized by `tokenizer_file` when given: `PreparedMix`),
    or the training split of `data_args.dataset_name`."""
    if data_args.dataset_name:
        return _dataset_training_set(data_args, training_args, tokenizer_train_samples)
    return _text_training_set(data_dir, data_args, training_args.seed, tokenizer_file)


def load_split(data_args, data_dir: Path | None, split: str, limit: int | None, training_args):
    """A validation or test split as (sources, targets), every pair as it is (so scores stay comparable)."""
    if not data_args.dataset_name:
        paths = data.split_paths(data_dir, split, data_args.source_lang, data_args.target_lang)
        return _read_pairs(paths, split, limit, clean=False)
    with training_args.main_process_first(local=training_args.save_on_each_node, desc=f"loading {split}"):
        dataset = data.load_translation_split(
            data_args.dataset_name, data_args.dataset_config_name, split, data_args.streaming
        )
        sources, targets = data.dataset_pairs(dataset, data_args.source_lang, data_args.target_lang, limit)
    print(f"[data] {data_args.dataset_name} {split}: {len(sources)} pairs (kept as they are)")
    return sources, targets


def _read_pairs(paths: tuple[Path, Path], name: str, limit: int | None, clean: bool):
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


def _text_training_set(data_dir: Path, data_args, seed: int, tokenizer_file: Path | None = None) -> TextTrainingSet:
    """The main corpus and --extra_train ones, cleaned, mixed by weight, with --case_augmentation variants; or, when
    an earlier start of the run kept it (`PreparedMix`), that mix tokenized."""
    if not data_args.train_weight > 0:
        raise data.DataError(f"--train_weight {data_args.train_weight}: the weight must be above 0.")
    main_corpus = data.Corpus(prefix=str(data_dir / data_args.train_split), weight=data_args.train_weight)
    corpora = [main_corpus] + [data.parse_corpus(spec) for spec in data_args.extra_train]
    cache = None
    if tokenizer_file is not None:
        missing = [
            corpus.prefix
            for corpus in corpora
            for lang in (data_args.source_lang, data_args.target_lang)
            if not Path(f"{corpus.prefix}.{lang}").is_file()
        ]
        cache = None if missing else PreparedMix(data_args, corpora, seed, tokenizer_file)
        kept = cache.load() if cache is not None else None
        if kept is not None:
            started = time.time()
            dataset, facts = kept
            print(
                f"[data] training mix: {len(dataset):,} pairs per epoch, tokenized by an earlier start of this run "
                f"(read in {time.time() - started:.1f}s from {cache.folder()})"
            )
            return TextTrainingSet([], [], [], corpora, [], prepared=dataset, cache=cache, known_facts=facts)
    for corpus in corpora:
        paths = (Path(f"{corpus.prefix}.{data_args.source_lang}"), Path(f"{corpus.prefix}.{data_args.target_lang}"))
        name = data_args.train_split if corpus is main_corpus else corpus.prefix
        corpus.sources, corpus.targets = _read_pairs(paths, name, data_args.max_train_samples, clean=True)
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
    return TextTrainingSet(sources, targets, tagged, corpora, texts, cache=cache)


def _dataset_training_set(data_args, training_args, tokenizer_train_samples: int) -> DatasetTrainingSet:
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
            dataset = dataset.map(
                data.clean_batch,
                batched=True,
                fn_kwargs=languages,
                remove_columns=dataset.column_names,
                desc="cleaning",
            )
            if len(dataset) == 0:
                raise data.DataError(f"{name} {data_args.train_split}: all pairs were dropped by cleaning.")
            print(f"[data] {name} {data_args.train_split}: kept {len(dataset)} pairs of {total}")

    def tokenizer_texts() -> list[str]:
        if streaming:
            sample = list(dataset.take(tokenizer_train_samples))
            sources, targets = [row["source"] for row in sample], [row["target"] for row in sample]
        else:
            sample = dataset
            if len(dataset) > tokenizer_train_samples:
                sample = dataset.shuffle(seed=training_args.seed).select(range(tokenizer_train_samples))
            sources, targets = sample["source"], sample["target"]
        print(f"[tokenizer] training on {len(sources)} pairs of {name}")
        return list(sources) + list(targets)

    corpus = {
        "name": name,
        "config": data_args.dataset_config_name,
        "split": data_args.train_split,
        "pairs": None if streaming else len(dataset),
        "weight": 1.0,
        "tag": None,
        "streaming": streaming,
    }
    return DatasetTrainingSet(dataset, corpus, tokenizer_texts)


def dataset_facts(data_args) -> dict:
    """The dataset a run trained on, named as the Hub names it (the card links it)."""
    if data_args.dataset_name:
        return {
            "name": data_args.dataset_name,
            "config": data_args.dataset_config_name,
            "validation_split": data_args.validation_split,
            "test_split": data_args.test_split or None,
        }
    # Text files: Multi30k (downloaded, or a local copy with its split names), on the Hub as bentrevett/multi30k.
    return {
        "name": data.MULTI30K_HUB_ID,
        "config": None,
        "files": data_args.data_dir or "downloaded",
        "validation_split": data_args.validation_split,
        "test_split": data_args.test_split or None,
    }


# ---------------------------------------------------------------------------------------------------------- tokenizer


def mix_tokenizer_file(tokenizer_args, output_dir: Path) -> Path | None:
    """The tokenizer.json that will encode the run's mix: --tokenizer_name's (a local folder), or the one the run
    saves in its output folder (there from the run's first start on); None for a Hub id."""
    if tokenizer_args.tokenizer_name:
        given = Path(tokenizer_args.tokenizer_name) / "tokenizer.json"
        return given if given.is_file() else None
    return output_dir / "tokenizer.json"


def run_tokenizer(tokenizer_args, training_args, texts, max_len: int, tag_token: str | None):
    """The run's tokenizer: one process trains (or loads) it and saves it in the output folder; the others wait, then
    load what it saved."""
    output_dir = Path(training_args.output_dir)
    with training_args.main_process_first(local=training_args.save_on_each_node, desc="the tokenizer"):
        if training_args.should_save:
            return prepare_tokenizer(tokenizer_args, output_dir, texts, max_len, tag_token)
        return load_tokenizer(output_dir)


def prepare_tokenizer(tokenizer_args, output_dir: Path, texts, max_len: int, tag_token: str | None = None):
    """The tokenizer of this run: given (`tokenizer_args.tokenizer_name`), or already in the output folder (a resumed
    run), or trained now (`vocab_size`, `bpe_min_frequency`, `tokenizer_train_samples`); saved in `output_dir`.

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
                "tokenizer use a new --output_dir (or --overwrite_output_dir)."
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


# ------------------------------------------------------------------------------------------------------- tokenization


# Pairs encoded at once. The tokenizer's output for a whole mix (an Encoding per sentence, then Python lists of ids)
# would hold about 6 KB a pair: 7-10 GB for the 1.26 million pairs of the distillation mix, kept by the process for
# the whole run. A chunk's rows go into an Arrow table (a few hundred bytes a pair) before the next chunk is encoded.
TOKENIZE_CHUNK = 20_000


def tokenize_pairs(tokenizer, sources, targets, data_args, tagged: list[bool] | None = None) -> Dataset:
    """A `Dataset` of `encode_pairs` rows, encoded `TOKENIZE_CHUNK` pairs at a time."""
    chunks = []
    for start in range(0, max(len(sources), 1), TOKENIZE_CHUNK):  # no pairs: one empty chunk, as one pass had
        part = slice(start, start + TOKENIZE_CHUNK)
        part_tagged = None if tagged is None else tagged[part]
        chunks.append(Dataset.from_dict(encode_pairs(tokenizer, sources[part], targets[part], data_args, part_tagged)))
    return chunks[0] if len(chunks) == 1 else concatenate_datasets(chunks)


def tokenize_training_set(tokenizer, training_set, data_args, training_args):
    """The training set as the Trainer reads it (a stream is tokenized lazily, batch by batch)."""
    if isinstance(training_set, TextTrainingSet):
        if training_set.prepared is not None:
            return training_set.prepared
        started = time.time()
        dataset = tokenize_pairs(tokenizer, training_set.sources, training_set.targets, data_args, training_set.tagged)
        print(f"[data] tokenized {len(dataset):,} pairs in {time.time() - started:.1f}s")
        if training_set.cache is not None and training_args.should_save:
            training_set.cache.save(dataset, training_set.facts(data_args.tag_token))
        return dataset

    def encode(batch):
        return encode_pairs(tokenizer, batch["source"], batch["target"], data_args)

    if data_args.streaming:
        return training_set.dataset.map(encode, batched=True, remove_columns=["source", "target"])
    with training_args.main_process_first(local=training_args.save_on_each_node, desc="tokenizing"):
        return training_set.dataset.map(encode, batched=True, remove_columns=["source", "target"], desc="tokenizing")


def encode_pairs(tokenizer, sources, targets, data_args, tagged: list[bool] | None = None) -> dict:
    """input_ids, attention_mask, labels and length of each pair: sources truncated to `data_args.max_source_length`
    and labels to `max_target_length`, the final </s> kept; tagged sources get `data_args.tag_token` in front."""
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
        input_ids = [
            truncated([tag_id] + ids, data_args.max_source_length) if tag else ids
            for ids, tag in zip(input_ids, tagged, strict=True)
        ]
    # Labels can be longer than sources; truncate them to their own limit, keeping the final </s>.
    labels = [truncated(ids, data_args.max_target_length) for ids in encoded["labels"]]
    return {
        "input_ids": input_ids,
        "attention_mask": [[1] * len(ids) for ids in input_ids],
        "labels": labels,
        "length": [len(ids) for ids in input_ids],
    }
