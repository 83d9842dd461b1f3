"""Parallel text files: fetch Multi30k, read and validate a source/target pair of files, drop unusable pairs, and mix
several training corpora (weights, tagged synthetic sources, case variants).

One sentence per line; line N of the source file translates line N of the target file.
"""

import gzip
import html
import random
import shutil
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

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
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise DataError(f"{path} is not UTF-8 text ({error}); expected one sentence per line.") from error
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    return [line.rstrip("\r") for line in lines]


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


def _normalise(text: str) -> str:
    # Upstream defects: HTML entities (&amp;), non-breaking spaces, tabs, stray outer spaces.
    text = html.unescape(text).replace("\u00a0", " ").replace("\t", " ")
    return " ".join(text.split())


def _is_placeholder(text: str) -> bool:
    return not any(character.isalnum() for character in text)


def clean_pairs(sources: list[str], targets: list[str]) -> tuple[list[str], list[str], Counter]:
    """Normalise whitespace and entities, and drop pairs that cannot teach translation; returns the reasons."""
    kept_sources, kept_targets, dropped = [], [], Counter()
    for source, target in zip(sources, targets, strict=True):
        source, target = _normalise(source), _normalise(target)
        if not source or not target:
            dropped["empty side"] += 1
        elif _is_placeholder(source) or _is_placeholder(target):
            dropped["placeholder (no letters or digits, e.g. '@@')"] += 1
        else:
            kept_sources.append(source)
            kept_targets.append(target)
    return kept_sources, kept_targets, dropped


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
        return {"name": self.prefix, "pairs": len(self.sources), "weight": self.weight,
                "tag": tag_token if self.tagged else None}


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
    """Extra pairs for robustness to casing: a random `fraction` of the pairs, each upper-cased or lower-cased
    (half and half, chosen at random), source and target alike. Returns (index of the original pair, source, target).

    The target follows the source's casing, so the model learns one rule (keep the writer's casing style) instead of
    restoring German capitalisation from caseless input, and the content it learns from cased text carries over.
    """
    if not 0 <= fraction <= 1:
        raise DataError(f"--case_augmentation {fraction}: expected a fraction between 0 and 1.")
    rng = random.Random(seed)
    chosen = sorted(rng.sample(range(len(sources)), round(fraction * len(sources))))
    variants = []
    for index in chosen:
        change = str.upper if rng.random() < 0.5 else str.lower
        variants.append((index, change(sources[index]), change(targets[index])))
    return variants
