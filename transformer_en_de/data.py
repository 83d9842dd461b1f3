"""Parallel text files: fetch Multi30k, read and validate a source/target pair of files, drop unusable pairs, and mix
several training corpora (weights, tagged synthetic sources, case variants); or a `datasets` dataset (Hub or local,
in memory or streamed) read as pairs.

One sentence per line (lines end in LF, CRLF or CR: `split_lines`); line N of the source file translates line N of the
target file.
"""

import contextlib
import gzip
import html
import itertools
import random
import re
import shutil
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import datasets
from huggingface_hub import constants as hub_constants

MULTI30K_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/{split}.{lang}.gz"
MULTI30K_SPLITS = ("train", "val", "test_2016_flickr")
DEFAULT_CACHE = Path.home() / ".cache" / "transformer-en-de" / "multi30k"


class DataError(ValueError):
    """A parallel corpus that cannot be used as given; the message names the files and the fix."""


def download_multi30k(cache_dir: str | Path = DEFAULT_CACHE, languages=("en", "de"), timeout: float = 10.0) -> Path:
    """Fetch the upstream Multi30k files once into `cache_dir` (unzipped) and return the folder."""
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    for split in MULTI30K_SPLITS:
        for lang in languages:
            target = cache_dir / f"{split}.{lang}"
            if target.is_file():
                continue
            url = MULTI30K_URL.format(split=split, lang=lang)
            partial = target.with_suffix(target.suffix + ".part")
            try:
                with urllib.request.urlopen(url, timeout=timeout) as response, open(partial, "wb") as out:
                    out.write(gzip.decompress(response.read()))
            except (urllib.error.URLError, TimeoutError, OSError) as error:
                partial.unlink(missing_ok=True)
                raise DataError(
                    f"Could not download {url} ({error}). There seems to be no network: pass --data_dir with a "
                    f"local copy of Multi30k ({', '.join(MULTI30K_SPLITS)} .{'/.'.join(languages)} files)."
                ) from error
            shutil.move(partial, target)
    return cache_dir


def read_lines(path: str | Path) -> list[str]:
    path = Path(path)
    if not path.is_file():
        raise DataError(f"Missing data file: {path}")
    try:
        text = path.read_bytes().decode("utf-8")  # bytes: the line breaks are split_lines' to find, as they are
    except UnicodeDecodeError as error:
        raise DataError(f"{path} is not UTF-8 text ({error}); expected one sentence per line.") from error
    return split_lines(text)


# A line ends at LF (Unix), CRLF (Windows) or a lone CR (classic Mac OS), as in Python's text files (universal
# newlines); the other breaks `str.splitlines` knows (U+2028, form feeds, ...) are characters of a sentence.
_LINE_END = re.compile(r"\r\n|\r|\n")


def split_lines(text: str) -> list[str]:
    """One sentence per line, the lines ending in LF, CRLF or CR alike (a file saved on any system, or mixed); the
    line break after the last line is optional. Every reader of text files in the project splits with this."""
    lines = _LINE_END.split(text) if "\r" in text else text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the line break that ends the last line
    return lines


def read_parallel(source_path: str | Path, target_path: str | Path) -> tuple[list[str], list[str]]:
    """Both sides of a parallel corpus, checked to pair up line by line."""
    sources, targets = read_lines(source_path), read_lines(target_path)
    if len(sources) != len(targets):
        raise DataError(
            f"{source_path} has {len(sources)} lines but {target_path} has {len(targets)}: "
            f"a parallel corpus needs one target line per source line."
        )
    if not sources:
        raise DataError(f"{source_path} and {target_path} are empty.")
    return sources, targets


def split_paths(data_dir: str | Path, split: str, source_lang: str, target_lang: str) -> tuple[Path, Path]:
    data_dir = Path(data_dir)
    return data_dir / f"{split}.{source_lang}", data_dir / f"{split}.{target_lang}"


def normalise_text(text: str) -> str:
    # Upstream defects: HTML entities (&amp;), non-breaking spaces, tabs, stray outer spaces.
    text = html.unescape(text).replace("\u00a0", " ").replace("\t", " ")
    return " ".join(text.split())


def _is_placeholder(text: str) -> bool:
    return not any(character.isalnum() for character in text)


def clean_line(text: str) -> str:
    """A line as training data is cleaned (entities, non-breaking spaces, runs of whitespace), or "" where cleaning
    would drop it (nothing left, or no letter or digit)."""
    text = normalise_text(text)
    return "" if _is_placeholder(text) else text


def clean_pairs(sources: list[str], targets: list[str]) -> tuple[list[str], list[str], Counter]:
    """Normalise whitespace and entities, and drop pairs that cannot teach translation; returns the reasons."""
    kept_sources, kept_targets, dropped = [], [], Counter()
    for source, target in zip(sources, targets, strict=True):
        source, target = normalise_text(source), normalise_text(target)
        if not source or not target:
            dropped["empty side"] += 1
        elif _is_placeholder(source) or _is_placeholder(target):
            dropped["placeholder (no letters or digits, e.g. '@@')"] += 1
        else:
            kept_sources.append(source)
            kept_targets.append(target)
    return kept_sources, kept_targets, dropped


_REPEATED_PHRASE = re.compile(r"\b(\w+(?:\W+\w+){0,2})(?:\W+\1\b){2}", re.IGNORECASE)


def is_loop(source: str, translation: str, most: float = 3.0) -> bool:
    """Whether a translation looks like a decoding loop ("Schnee Schnee Schnee ...", "wenn Sie wenn Sie wenn Sie"): a
    word or a phrase of up to three words three times in a row, or more than `most` times its source's characters."""
    return bool(_REPEATED_PHRASE.search(translation)) or len(translation) > most * max(len(source), 1)


def drop_loops(prefix: str, source_lang: str = "en", target_lang: str = "de") -> tuple[int, int]:
    """Write `{prefix}-clean.{lang}`: the pairs of `{prefix}.{lang}` whose translation is no loop; (kept, read)."""
    sides = [Path(f"{prefix}.{lang}").read_text(encoding="utf-8").splitlines() for lang in (source_lang, target_lang)]
    pairs = list(zip(*sides, strict=True))
    kept = [pair for pair in pairs if not is_loop(*pair)]
    for lang, side in ((source_lang, 0), (target_lang, 1)):
        with open(f"{prefix}-clean.{lang}", "w", encoding="utf-8") as handle:
            handle.writelines(pair[side] + "\n" for pair in kept)
    return len(kept), len(pairs)


# ------------------------------------------------------------------------------------------------ training mixtures


@dataclass
class Corpus:
    """One training corpus: `{prefix}.{source_lang}` / `{prefix}.{target_lang}`, seen `weight` times per epoch.

    `tagged` marks synthetic sources (back-translations): they get the tag token in front (Caswell et al. 2019).
    """

    prefix: str
    weight: float = 1.0
    tagged: bool = False
    sources: list[str] = field(default_factory=list, repr=False)
    targets: list[str] = field(default_factory=list, repr=False)

    def facts(self, tag_token: str) -> dict:
        return {
            "name": self.prefix,
            "pairs": len(self.sources),
            "weight": self.weight,
            "tag": tag_token if self.tagged else None,
        }


def parse_corpus(spec: str) -> Corpus:
    """`PREFIX[:WEIGHT][:tagged]`, e.g. `bt/task2:0.5:tagged` → bt/task2.en + bt/task2.de, half of it per epoch, tagged.

    The options are read from the right, so a prefix may itself contain colons.
    """
    parts = spec.split(":")
    weight, tagged = 1.0, False
    while len(parts) > 1:
        option = parts[-1].strip()
        if option.lower() in ("tagged", "tag", "bt"):
            tagged = True
        else:
            try:
                weight = float(option)
            except ValueError:
                break
        parts.pop()
    prefix = ":".join(parts)
    if not prefix:
        raise DataError(f"--extra_train {spec!r}: no file prefix; expected PREFIX[:WEIGHT][:tagged].")
    if not weight > 0:
        raise DataError(f"--extra_train {spec!r}: the weight must be above 0 (times the corpus is seen per epoch).")
    return Corpus(prefix=prefix, weight=weight, tagged=tagged)


def upsample(count: int, weight: float, rng: random.Random) -> list[int]:
    """Indices of a corpus of `count` pairs seen `weight` times per epoch: every pair int(weight) times, plus a
    random (seeded) share of the pairs for the fraction: round(weight * count) indices in all, in corpus order."""
    whole, fraction = int(weight), weight - int(weight)
    extra = sorted(rng.sample(range(count), round(fraction * count))) if fraction else []
    return sorted([index for index in range(count) for _ in range(whole)] + extra)


def mix_corpora(corpora: list[Corpus], seed: int) -> tuple[list[str], list[str], list[bool]]:
    """(sources, targets, tagged) of all corpora, each upsampled by its weight; the Trainer shuffles them."""
    rng = random.Random(seed)
    sources, targets, tagged = [], [], []
    for corpus in corpora:
        for index in upsample(len(corpus.sources), corpus.weight, rng):
            sources.append(corpus.sources[index])
            targets.append(corpus.targets[index])
            tagged.append(corpus.tagged)
    return sources, targets, tagged


def case_variants(sources: list[str], targets: list[str], fraction: float, seed: int) -> list[tuple[int, str, str]]:
    """Extra pairs for robustness to casing: a random `fraction` of the pairs with the source upper-cased or
    lower-cased (half and half, chosen at random) and the target as written. Returns (index of the original pair,
    source, target).

    Only the source changes: the model learns to read text typed in capitals or without capitals and still writes
    German as it is written (nouns capitalised). Changing the target too was tried first and failed: after 5 epochs of
    fine-tuning, capitals still came out as garbage in capitals ("EIN GRAUF MIN MIN ..."; lowercased BLEU 0.4), since
    German in capitals is made of byte-level BPE pieces the model almost never writes.
    """
    if not 0 <= fraction <= 1:
        raise DataError(f"--case_augmentation {fraction}: expected a fraction between 0 and 1.")
    rng = random.Random(seed)
    chosen = sorted(rng.sample(range(len(sources)), round(fraction * len(sources))))
    variants = []
    for index in chosen:
        change = str.upper if rng.random() < 0.5 else str.lower
        variants.append((index, change(sources[index]), targets[index]))
    return variants


# ------------------------------------------------------------------------------------------- datasets (Hub or local)
#
# `--dataset_name` reads a `datasets` dataset instead of text files: a Hub id (`wmt14` with config `de-en`), a local
# folder of data files (train.jsonl, validation.parquet, ...: `datasets` infers the splits from the file names), or a
# folder written by `save_to_disk`. Rows are `{"translation": {"de": ..., "en": ...}}` (WMT, Multi30k on the Hub) or
# have one column per language.

MULTI30K_HUB_ID = "bentrevett/multi30k"


@contextlib.contextmanager
def _hub_offline():
    """`datasets` and `huggingface_hub` in offline mode (the local cache only) while the block runs."""
    saved = datasets.config.HF_HUB_OFFLINE, hub_constants.HF_HUB_OFFLINE
    datasets.config.HF_HUB_OFFLINE = hub_constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        datasets.config.HF_HUB_OFFLINE, hub_constants.HF_HUB_OFFLINE = saved


def load_translation_split(
    name: str,
    config: str | None,
    split: str,
    streaming: bool = False,
    *,
    hub_reachable: Callable[[], bool] | None = None,
):
    """One split of a dataset as a `datasets.Dataset` (or an `IterableDataset` with `streaming`).

    A Hub id is fetched (or taken from the local cache); when the Hub is unreachable only the cache is tried, at once,
    and a `DataError` says what to do, instead of `datasets` retrying for half a minute per file.
    """
    path = Path(name).expanduser()
    if path.is_dir() and ((path / "dataset_dict.json").is_file() or (path / "state.json").is_file()):
        saved = datasets.load_from_disk(str(path))
        if isinstance(saved, datasets.DatasetDict):
            if split not in saved:
                raise DataError(f"{name} has no split {split!r} (it has {', '.join(saved)}).")
            saved = saved[split]
        return saved.to_iterable_dataset() if streaming else saved
    local = path.exists()
    offline = not local and not (hub_reachable or _default_hub_reachable)()
    try:
        with _hub_offline() if offline else contextlib.nullcontext():
            return datasets.load_dataset(str(path) if local else name, config, split=split, streaming=streaming)
    except ValueError as error:
        if "split" in str(error).lower():
            raise DataError(f"--dataset_name {name}: no split {split!r} ({error}).") from error
        raise DataError(f"--dataset_name {name} could not be loaded: {error}") from error
    except (ConnectionError, OSError, FileNotFoundError) as error:
        if offline:
            raise DataError(
                f"--dataset_name {name}: the Hugging Face Hub is unreachable (offline) and "
                f"{'streaming reads from the Hub' if streaming else 'the dataset is not in the local datasets cache'}. "
                "Run once with network access (a downloaded dataset is cached), pass a local dataset folder as "
                "--dataset_name, or text files with --data_dir."
            ) from error
        raise DataError(f"--dataset_name {name} could not be loaded: {error}") from error


def _default_hub_reachable() -> bool:
    from .hub_access import hub_is_reachable

    return hub_is_reachable()


def row_pair(row: dict, source_lang: str, target_lang: str) -> tuple[str, str]:
    """(source, target) of a dataset row: `{"translation": {lang: text}}` or one column per language."""
    pair = row.get("translation", row)
    try:
        return pair[source_lang], pair[target_lang]
    except (KeyError, TypeError):
        columns = ", ".join(row)
        raise DataError(
            f"A dataset row has no {source_lang!r}/{target_lang!r} text (columns: {columns}). Expected "
            f'{{"translation": {{"{source_lang}": ..., "{target_lang}": ...}}}} or a column per language; check '
            "--source_lang/--target_lang and --dataset_config_name."
        ) from None


def dataset_pairs(dataset, source_lang: str, target_lang: str, limit: int | None = None) -> tuple[list[str], list[str]]:
    """The first `limit` (source, target) pairs of a dataset or a stream, as two lists in dataset order."""
    sources, targets = [], []
    for row in itertools.islice(dataset, limit):
        source, target = row_pair(row, source_lang, target_lang)
        sources.append(source)
        targets.append(target)
    if not sources:
        raise DataError("The dataset split is empty.")
    return sources, targets


def clean_batch(rows: dict, source_lang: str, target_lang: str) -> dict[str, list[str]]:
    """A batch of dataset rows as `{"source": [...], "target": [...]}`, normalised, unusable pairs dropped (the
    batched-`map` form of `clean_pairs`)."""
    columns = list(rows)
    count = len(rows[columns[0]]) if columns else 0
    sources, targets = [], []
    for index in range(count):
        source, target = row_pair({name: rows[name][index] for name in columns}, source_lang, target_lang)
        sources.append(source)
        targets.append(target)
    kept_sources, kept_targets, _ = clean_pairs(sources, targets)
    return {"source": kept_sources, "target": kept_targets}
