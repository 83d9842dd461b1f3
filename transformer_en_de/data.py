"""Parallel text files: fetch Multi30k, read and validate a source/target pair of files, drop unusable pairs.

One sentence per line; line N of the source file translates line N of the target file.
"""

import gzip
import html
import shutil
import urllib.error
import urllib.request
from collections import Counter
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
