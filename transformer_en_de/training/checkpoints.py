"""A run's checkpoints and the models made from them: find them, average them, score them through the engine.

train.py (`--average_last N`) and average_checkpoints.py share these, so an averaged model is made and scored the
same way wherever it comes from. Averaging the weights of the last checkpoints is the paper's recipe (section 6.1:
the base models average the last 5 checkpoints, the big ones the last 20).
"""

import json
import pickle
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy
import torch
from safetensors import SafetensorError, safe_open
from transformers import GenerationConfig

from modeling import TransformerMTForConditionalGeneration
from modeling.length_bound import saved_bound
from modeling.modeling_transformer_mt import set_translation_defaults

from ..decoding.engine import DecodingSettings
from ..decoding.loading import PICKLE_WEIGHTS, SAFE_WEIGHTS, pickle_only_message
from ..evaluation import score_model

# The values of n tried by `train.py --average_last N` (those up to N, and N itself).
AVERAGE_CANDIDATES = (1, 2, 5, 10, 20)
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def complete_checkpoints(run_dir: str | Path) -> list[Path]:
    """The run's checkpoint-STEP folders that were saved to the end, oldest first.

    `trainer_state.json` is the last file a checkpoint writes: a folder without it was cut off while saving.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    found = []
    for path in run_dir.iterdir():
        match = _CHECKPOINT.match(path.name)
        if match and path.is_dir() and (path / "trainer_state.json").is_file() and (path / "config.json").is_file():
            found.append((int(match.group(1)), path))
    return [path for _, path in sorted(found)]


class CheckpointError(ValueError):
    """A checkpoint or model folder that cannot be loaded; the message names it and says what to do."""


def refuse_pickle_only(folder: Path) -> None:
    """CheckpointError, with the command that converts them, where `folder` has pickle weights and no safetensors."""
    has = lambda names: any((folder / name).is_file() for name in names)  # noqa: E731
    if has(PICKLE_WEIGHTS) and not has(SAFE_WEIGHTS):
        raise CheckpointError(f"{folder} {pickle_only_message(str(folder))}")


def load_checkpoint(folder: str | Path) -> TransformerMTForConditionalGeneration:
    """The model saved in `folder` (a checkpoint or a model folder), from safetensors only; CheckpointError in one
    line where it cannot be loaded (pickle weights only: with the command that converts them)."""
    folder = Path(folder)
    refuse_pickle_only(folder)
    try:
        return TransformerMTForConditionalGeneration.from_pretrained(folder, use_safetensors=True)
    except (OSError, ValueError, SafetensorError) as error:
        cause = " ".join(str(error).split())
        raise CheckpointError(
            f"{folder} could not be loaded ({type(error).__name__}: {cause[:300]}). Give a checkpoint or model folder "
            "that train.py wrote to the end (config.json and model.safetensors)."
        ) from None


def damaged_checkpoint(checkpoint: str | Path) -> str | None:
    """What makes a checkpoint folder unusable for resuming (a file cut short or unreadable, or a torch.save file a
    safe load refuses), or None if it is sound.

    Reads headers and indexes only, not the tensors: the weights' safetensors header (which must cover the whole
    file), the zip index of each torch.save file (at the end of the file, so a truncated one has none), the JSON state;
    and unpickles each torch.save file as the Trainer will (`weights_only`, numpy allowed), its tensors mapped, not
    read.
    """
    checkpoint = Path(checkpoint)
    for path in sorted(checkpoint.glob("*.safetensors")):
        try:
            with safe_open(str(path), "pt"):
                pass
        except (SafetensorError, OSError) as error:
            return f"{path.name} is damaged ({error})"
    for path in sorted(checkpoint.glob("*.pt")) + sorted(checkpoint.glob("*.pth")):
        if not zipfile.is_zipfile(path):
            return f"{path.name} is damaged (cut short or not a torch.save file)"
        refusal = _unsafe_pickle(path)
        if refusal:
            return refusal
    try:
        json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        return f"trainer_state.json is damaged ({error})"
    return None


def numpy_globals() -> list:
    """What the Trainer's RNG state pickles besides tensors, as its own safe load allows: numpy arrays (their
    reconstructor as an array's `__reduce__` names it) and their dtypes."""
    reconstruct = numpy.zeros(0).__reduce__()[0]
    return [reconstruct, numpy.ndarray, numpy.dtype, type(numpy.dtype(numpy.uint32))]


def _unsafe_pickle(path: Path) -> str | None:
    """Why a safe load (`weights_only`, as the Trainer loads optimizer, scheduler and RNG states) refuses a torch.save
    file, or None. A file this project's training wrote is plain tensors and numbers; anything else in it was put
    there by something else, and is never unpickled with code allowed."""
    try:
        with torch.serialization.safe_globals(numpy_globals()):
            torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError as error:
        found = re.search(r"Unsupported global: GLOBAL (\S+)", str(error))
        what = f"it names {found.group(1)}" if found else " ".join(str(error).split())[:200]
        return (
            f"{path.name} holds more than tensors and numbers ({what}), which a safe load refuses: training never "
            "writes that, so the file was changed or comes from elsewhere"
        )
    except (RuntimeError, OSError) as error:
        return f"{path.name} is damaged ({' '.join(str(error).split())[:200]})"
    return None


def validation_curve(log_history: list[dict]) -> list[dict]:
    """The evaluations of a Trainer's log history (trainer_state.json), as eval_results.json keeps them."""
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


# How a trained folder chose to search (a student started with fewer beams, recipes/deep_shallow_init.py
# --num_beams): kept through training and averaging, where everything else of the generation config is rebuilt.
SEARCH_CHOICES = ("num_beams", "length_penalty", "early_stopping")


def restore_translation_defaults(model):
    """The Trainer leaves checkpoints with the cache off and a generation config with the model config's fields mixed
    in: undo both. A model that already decodes as a folder of ours does (its length bound is set: it was trained or
    started from one) keeps its own search settings; any other gets the paper's (beam 4, length penalty 0.6)."""
    previous = model.generation_config
    ours = saved_bound(previous) != (None, None)
    chosen = {name: getattr(previous, name) for name in SEARCH_CHOICES} if ours else {}
    model.config.use_cache = True
    model.generation_config = GenerationConfig()
    set_translation_defaults(model.generation_config, model.config)
    for name, value in chosen.items():
        setattr(model.generation_config, name, value)
    return model


def average_checkpoints(checkpoints: list[str | Path]) -> TransformerMTForConditionalGeneration:
    """One model whose floating-point weights are the mean of the checkpoints' (loaded one at a time)."""
    if not checkpoints:
        raise ValueError("average_checkpoints needs at least one checkpoint folder.")
    for path in checkpoints:  # before the first is loaded: a refusal costs nothing
        refuse_pickle_only(Path(path))
    averaged = load_checkpoint(checkpoints[0])
    state = averaged.state_dict()
    sums = {name: tensor.detach().double().clone() for name, tensor in state.items() if tensor.is_floating_point()}
    for path in checkpoints[1:]:
        other = load_checkpoint(path).state_dict()
        if other.keys() != state.keys() or any(other[name].shape != state[name].shape for name in sums):
            raise ValueError(f"{path} is not a checkpoint of the same model as {checkpoints[0]}.")
        for name in sums:
            sums[name] += other[name].double()
    with torch.no_grad():
        for name, total in sums.items():
            state[name].copy_((total / len(checkpoints)).to(state[name].dtype))
    return restore_translation_defaults(averaged)


def candidate_sizes(average_last: int, available: int) -> list[int]:
    """The n of "the last n checkpoints" to try: 1, 2, 5, ... up to `average_last` (and it), within `available`."""
    top = min(average_last, available)
    return sorted({n for n in AVERAGE_CANDIDATES if n <= top} | {top}) if top >= 1 else []


@dataclass
class AverageChoice:
    """The candidate shipped by `choose_average`, its validation scores, and every candidate with its score."""

    model: TransformerMTForConditionalGeneration
    name: str
    checkpoints: list[Path]
    scores: dict
    candidates: list[dict] = field(default_factory=list)


def choose_average(
    run_dir: str | Path,
    average_last: int,
    tokenizer,
    sources: list[str],
    references: list[str],
    settings: DecodingSettings = DecodingSettings(),
    extra: dict[str, list[Path]] | None = None,
    device: str | torch.device = "cpu",
) -> AverageChoice:
    """Average the last n checkpoints for each candidate n, score each on validation through the engine, keep the best.

    The candidates are scored on `device` (a GPU run's own GPU: on its CPU the beam searches would take longer than
    the training's last epochs).

    `extra` adds named candidates (e.g. the best single checkpoint of the run) unless the same checkpoints are already
    a candidate. Ties keep the earlier candidate (fewer checkpoints).
    """
    checkpoints = complete_checkpoints(run_dir)
    if not checkpoints:
        raise ValueError(f"No complete checkpoint-* folder in {run_dir} to average.")
    named = {f"last {n}": checkpoints[-n:] for n in candidate_sizes(average_last, len(checkpoints))}
    for name, paths in (extra or {}).items():
        paths = [Path(path) for path in paths]
        if paths not in named.values():
            named[name] = paths
    choice = None
    candidates = []
    for name, paths in named.items():
        model = average_checkpoints(paths).to(device)
        _, scores = score_model(model, tokenizer, sources, references, settings)
        candidates.append(
            {
                "name": name,
                "checkpoints": [path.name for path in paths],
                "validation": {"bleu": scores["bleu"], "chrf": scores["chrf"]},
            }
        )
        print(f"[average] {name} ({', '.join(path.name for path in paths)}): val {scores['bleu']} BLEU")
        if choice is None or scores["bleu"] > choice.scores["bleu"]:
            choice = AverageChoice(model, name, paths, scores)
    choice.candidates = candidates
    return choice


def model_to_ship(trainer, average_last: int, tokenizer, validation: tuple[list[str], list[str]]):
    """(model, its validation scores or None, what the choice was): the best checkpoint of the run by validation BLEU,
    loaded the way users load it (the model in memory if none was saved); with `average_last`, the best of the
    averages of the last checkpoints and the best checkpoint, chosen on validation through the engine."""
    best = trainer.state.best_model_checkpoint
    if average_last:
        choice = choose_average(
            trainer.args.output_dir,
            average_last,
            tokenizer,
            *validation,
            extra={"best": [Path(best)]} if best else None,
            device=trainer.args.device,
        )
        print(f"[average] shipping {choice.name}: val {choice.scores['bleu']} BLEU")
        facts = dict(
            average_candidates=choice.candidates,
            chosen_average=choice.name,
            averaged_checkpoints=[path.name for path in choice.checkpoints],
        )
        return choice.model, choice.scores, facts
    if best:
        return load_checkpoint(best), None, {}
    return trainer.model, None, {}


__all__ = [
    "AVERAGE_CANDIDATES",
    "AverageChoice",
    "CheckpointError",
    "average_checkpoints",
    "candidate_sizes",
    "choose_average",
    "complete_checkpoints",
    "damaged_checkpoint",
    "load_checkpoint",
    "model_to_ship",
    "restore_translation_defaults",
    "validation_curve",
]
