"""Average the weights of several checkpoints into one model (the paper averages its last checkpoints, section 6.1).

    python average_checkpoints.py runs/my-run/checkpoint-3405 runs/my-run/checkpoint-4540 \
        --output_dir runs/averaged --data_dir ../shared/data/multi30k

The output folder is Hub-ready like train.py's: averaged weights, config and code, tokenizer, the translation
generation defaults, and, with --data_dir, the validation and test scores (through the translation engine with the
model's own decoding, every sentence in file order) in eval_results.json and the model card. The run folder's
eval_results.json gives the language pair, the validation curve and the commands; this command is appended to them.

    python average_checkpoints.py runs/my-run --average_last 10 --output_dir runs/averaged \
        --data_dir ../shared/data/multi30k --test_split ''

averages the last n checkpoints of the run for n in 1, 2, 5, 10, scores each on validation and saves the best, as
`train.py --average_last 10` does at the end of a run (for a run stopped before its end); every candidate's score goes
into eval_results.json. (--choose_last is the old name of --average_last; flags take dashes or underscores.)

Checkpoints of several runs that forked from one start (recipes/deep_shallow.sh FORK=...) average the same way, a
"soup": the record names each checkpoint with its run (fork-a/checkpoint-7500, fork-b/checkpoint-7500), keeps every
run's commands and training data, and gives no validation curve, since none of the runs' curves is the averaged
model's.

    python average_checkpoints.py --rescore models/transformer-en-de --data_dir ../shared/data/multi30k

re-measures the scores of an existing folder with its current generation config, keeping its commands and training
facts (`train.py --average_last N` averages and chooses on validation by itself at the end of a run).
"""

import argparse
import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from tokenizer import load_tokenizer
from transformer_en_de import data
from transformer_en_de.evaluation import (
    EvalResultsError,
    decoding_record,
    read_eval_results,
    score_splits,
    write_eval_results,
)
from transformer_en_de.publishing.model_card import write_model_card
from transformer_en_de.training.checkpoints import (
    average_checkpoints,
    choose_average,
    complete_checkpoints,
    load_checkpoint,
    validation_curve,
)


def score_files(model, tokenizer, data_dir: Path, splits: list[str], languages: tuple[str, str]) -> dict:
    """{split: scores} of the split files in `data_dir` (`evaluation.score_splits`)."""
    pairs = {split: data.read_parallel(*data.split_paths(data_dir, split, *languages)) for split in splits}
    return score_splits(model, tokenizer, pairs)[0]


def run_facts(run_dir: Path, last_checkpoint: Path) -> dict:
    """What the run recorded (its eval_results.json), else what its newest given checkpoint knows (the curve)."""
    recorded = read_eval_results(run_dir)
    if recorded is not None:
        return recorded
    state_path = last_checkpoint / "trainer_state.json"
    history = json.loads(state_path.read_text())["log_history"] if state_path.is_file() else []
    return {
        "languages": {"source": "en", "target": "de"},
        "command": [],
        "training": {"validation_curve": validation_curve(history)},
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "checkpoints",
        nargs="*",
        type=Path,
        help="checkpoint folders of one run, or of forks of one start (a soup: each run's checkpoints "
        "are named with their run); with --average_last: the run folder",
    )
    parser.add_argument(
        "--output_dir",
        "--output-dir",
        type=Path,
        default=None,
        help="the folder to write the averaged (or chosen) model to; needed unless --rescore",
    )
    parser.add_argument(
        "--tokenizer_name",
        "--tokenizer-name",
        "--tokenizer",
        type=Path,
        default=None,
        help="default: the run folder of the first checkpoint",
    )
    parser.add_argument(
        "--data_dir", "--data-dir", type=Path, default=None, help="score the splits below, write the card"
    )
    parser.add_argument(
        "--validation_split", "--validation-split", default="val", help="the split that chooses (default: %(default)s)"
    )
    parser.add_argument(
        "--test_split",
        "--test-split",
        default="test_2016_flickr",
        help="scored only, never to choose; '' to skip (default: %(default)s)",
    )
    parser.add_argument(
        "--average_last",
        "--average-last",
        "--choose_last",
        type=int,
        default=0,
        metavar="N",
        help="average the last n checkpoints of the run for n = 1, 2, 5, 10 ... N, keep the best on "
        "validation (needs --data_dir), as train.py --average_last N does at the end of a run "
        "(default: 0, average the checkpoints given)",
    )
    parser.add_argument(
        "--rescore",
        type=Path,
        default=None,
        metavar="FOLDER",
        help="re-measure FOLDER's scores (needs --data_dir) into its eval_results.json and card",
    )
    parser.add_argument(
        "--device",
        default="cuda" if torch.cuda.is_available() else "cpu",
        help="where the models are scored (default: a CUDA GPU if there is one)",
    )
    args = parser.parse_args(argv)
    splits = [split for split in (args.validation_split, args.test_split) if split]
    try:
        if args.rescore:
            if args.checkpoints or not args.data_dir:
                parser.error("--rescore FOLDER takes no checkpoints and needs --data_dir")
            return rescore(args.rescore, args.data_dir, splits, args.device)
        if not args.checkpoints or not args.output_dir:
            parser.error("give the checkpoint folders and --output_dir (or --rescore FOLDER)")
        scoring = Scoring(
            args.data_dir,
            args.validation_split,
            splits,
            "python average_checkpoints.py " + shlex.join(argv),
            args.device,
        )
        if args.average_last:
            if len(args.checkpoints) != 1 or not args.data_dir or args.average_last < 1:
                parser.error("--average_last N (N >= 1) takes one run folder and needs --data_dir")
            return choose(args.checkpoints[0], args.average_last, args.output_dir, args.tokenizer_name, scoring)
        return average(args.checkpoints, args.output_dir, args.tokenizer_name, scoring)
    except (data.DataError, EvalResultsError, FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


@dataclass
class Scoring:
    """What to score a new folder on (no `data_dir`: nothing) and the command to record."""

    data_dir: Path | None
    validation_split: str
    splits: list[str]  # the validation and test splits that are not ''
    command: str
    device: str = "cpu"


def average(checkpoints: list[Path], output_dir: Path, tokenizer_name: Path | None, scoring: Scoring) -> int:
    missing = [str(path) for path in checkpoints if not (path / "config.json").is_file()]
    if missing:
        raise FileNotFoundError(f"not checkpoint folders (no config.json): {', '.join(missing)}")
    run_dir = checkpoints[0].parent
    model = average_checkpoints(checkpoints).to(scoring.device)
    tokenizer = load_tokenizer(tokenizer_name or run_dir)
    print(f"averaged {len(checkpoints)} checkpoints into {output_dir}")
    save(output_dir, model, tokenizer, runs_facts(checkpoints), checkpoints, scoring)
    return 0


def runs_facts(checkpoints: list[Path]) -> dict:
    """`run_facts` of the checkpoints' run; of several runs (forks of one start averaged, a "soup"), the first run's
    facts with every run's commands and training corpora, and no validation curve, since no one run's curve is this
    model's."""
    run_dirs = list(dict.fromkeys(path.parent for path in checkpoints))
    every = [run_facts(run_dir, [path for path in checkpoints if path.parent == run_dir][-1]) for run_dir in run_dirs]
    facts = every[0]
    if len(every) == 1:
        return facts
    commands, corpora = [], []
    for other in every:
        commands += [command for command in other["command"] if command not in commands]
        corpora += [corpus for corpus in other["training"].get("corpora", []) if corpus not in corpora]
    training = {name: value for name, value in facts["training"].items() if name != "validation_curve"}
    if corpora:
        training["corpora"] = corpora
    return dict(facts, command=commands, training=training)


def checkpoint_names(checkpoints: list[Path]) -> list[str]:
    """checkpoint-N for checkpoints of one run; RUN/checkpoint-N when they come from several (the same N can recur)."""
    if len({path.parent for path in checkpoints}) == 1:
        return [path.name for path in checkpoints]
    return [f"{path.parent.name}/{path.name}" for path in checkpoints]


def choose(run_dir: Path, average_last: int, output_dir: Path, tokenizer_name: Path | None, scoring: Scoring) -> int:
    """The best on validation of the averages of the run's last n checkpoints, saved with every candidate's score."""
    checkpoints = complete_checkpoints(run_dir)
    if not checkpoints:
        raise FileNotFoundError(f"no complete checkpoint-* folder in {run_dir}")
    tokenizer = load_tokenizer(tokenizer_name or run_dir)
    run = run_facts(run_dir, checkpoints[-1])
    validation_split = scoring.validation_split
    sources, references = data.read_parallel(
        *data.split_paths(scoring.data_dir, validation_split, run["languages"]["source"], run["languages"]["target"])
    )
    choice = choose_average(run_dir, average_last, tokenizer, sources, references, device=scoring.device)
    print(f"[average] saving {choice.name} into {output_dir}: val {choice.scores['bleu']} BLEU")
    chosen = {"average_candidates": choice.candidates, "chosen_average": choice.name}
    save(
        output_dir,
        choice.model,
        tokenizer,
        run,
        choice.checkpoints,
        scoring,
        chosen,
        known={validation_split: choice.scores},
    )
    return 0


def save(
    output_dir: Path,
    model,
    tokenizer,
    run: dict,
    checkpoints: list[Path],
    scoring: Scoring,
    chosen: dict | None = None,
    known: dict | None = None,
) -> None:
    """The averaged model as a Hub-ready folder; with a data folder, scored (`known` scores are not measured again)."""
    model.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    if not scoring.data_dir:
        return
    languages = (run["languages"]["source"], run["languages"]["target"])
    training = dict(
        run["training"], validation_split=scoring.validation_split, averaged_checkpoints=checkpoint_names(checkpoints)
    )
    training.pop("average_candidates", None)  # the run's own choice; this model is another one
    training.pop("chosen_average", None)
    training.update(chosen or {})
    known = known or {}
    unknown = [split for split in scoring.splits if split not in known]
    scores = dict(known, **score_files(model, tokenizer, scoring.data_dir, unknown, languages))
    write_eval_results(
        output_dir,
        num_parameters=model.num_parameters(),
        languages=languages,
        decoding=decoding_record(model),
        scores={split: scores[split] for split in scoring.splits},
        command=[*run["command"], scoring.command],
        training=training,
    )
    write_model_card(output_dir, config=model.config)


def rescore(folder: Path, data_dir: Path, splits: list[str], device: str = "cpu") -> int:
    """The folder's scores measured again (e.g. after its generation config changed); all else is kept."""
    recorded = read_eval_results(folder)
    if recorded is None:
        raise FileNotFoundError(f"{folder} has no eval_results.json to rescore: average or train into it first.")
    # from_pretrained loads the generation config too: the scores are those of the folder's own decoding
    model = load_checkpoint(folder).to(device)
    tokenizer = load_tokenizer(folder)
    languages = (recorded["languages"]["source"], recorded["languages"]["target"])
    write_eval_results(
        folder,
        num_parameters=model.num_parameters(),
        languages=languages,
        decoding=decoding_record(model),
        scores=score_files(model, tokenizer, data_dir, splits, languages),
        command=recorded["command"],
        training=recorded["training"],
    )
    write_model_card(folder, config=model.config)
    return 0


if __name__ == "__main__":
    sys.exit(main())
