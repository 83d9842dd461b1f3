"""The tokenized training mix of a run kept on disk (`PreparedMix`), so that a resumed run starts training at once."""

import hashlib
import json
import os
import shutil
from pathlib import Path

from datasets import Dataset

from .. import data


class PreparedMix:
    """The tokenized training mix of a run, kept on disk so that a resumed run (or another run of the same mix) starts
    training at once instead of reading, cleaning, mixing and tokenizing every corpus again (about 3 minutes on one
    core for the 1.26 million pairs of Multi30k + the distillation data).

    Kept under `$TRANSFORMER_MT_CACHE` (default ~/.cache/transformer-en-de/prepared), by a fingerprint of everything
    the mix is made of: each corpus file's path, size and modification time, the weights and tags, the seed, the case
    augmentation, the length limits, the tag token, and the bytes of the tokenizer that encodes it (the one given by
    --tokenizer_name, or the run's own, saved in the output folder when the run first started)."""

    def __init__(self, data_args, corpora: list[data.Corpus], seed: int, tokenizer_file: Path):
        self.tokenizer_file = tokenizer_file
        files = [
            Path(f"{corpus.prefix}.{lang}")
            for corpus in corpora
            for lang in (data_args.source_lang, data_args.target_lang)
        ]
        self.recipe = {
            "files": [[str(path.resolve()), path.stat().st_size, path.stat().st_mtime_ns] for path in files],
            "corpora": [[corpus.prefix, corpus.weight, corpus.tagged] for corpus in corpora],
            "seed": seed,
            "case_augmentation": data_args.case_augmentation,
            "tag_token": data_args.tag_token,
            "max_train_samples": data_args.max_train_samples,
            "max_source_length": data_args.max_source_length,
            "max_target_length": data_args.max_target_length,
        }
        root = Path(os.environ.get("TRANSFORMER_MT_CACHE", Path.home() / ".cache" / "transformer-en-de"))
        self.root = root / "prepared"

    def folder(self) -> Path | None:
        """Where this mix is kept; None while the tokenizer that encodes it does not exist yet (a new BPE)."""
        if not self.tokenizer_file.is_file():
            return None
        fingerprint = hashlib.sha256(json.dumps(self.recipe, sort_keys=True).encode())
        fingerprint.update(self.tokenizer_file.read_bytes())
        return self.root / fingerprint.hexdigest()[:24]

    def load(self) -> tuple[Dataset, list[dict]] | None:
        folder = self.folder()
        if folder is None or not (folder / "facts.json").is_file():  # written last: the folder is complete
            return None
        return Dataset.load_from_disk(str(folder / "dataset")), json.loads((folder / "facts.json").read_text())

    def save(self, dataset: Dataset, facts: list[dict]) -> None:
        """Keep the mix (written beside, then renamed: a reader never sees half of it); a cache that cannot be
        written (a full disk) costs the next start its minutes, nothing else."""
        folder = self.folder()
        if folder is None or folder.exists():
            return
        partial = folder.with_name(f"{folder.name}.{os.getpid()}.partial")
        try:
            dataset.save_to_disk(str(partial / "dataset"))
            (partial / "facts.json").write_text(json.dumps(facts))
            partial.rename(folder)
            print(f"[data] the tokenized mix is kept in {folder}: a resumed run starts from it")
        except OSError as error:
            shutil.rmtree(partial, ignore_errors=True)
            print(f"[data] the tokenized mix could not be kept ({error}); a resumed run prepares it again")
