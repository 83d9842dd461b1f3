"""Average the weights of several checkpoints into one model (the paper averages its last checkpoints, section 6.1).

    python average_checkpoints.py runs/my-run/checkpoint-3405 runs/my-run/checkpoint-4540 \
        --output-dir runs/averaged --data_dir ../shared/data/multi30k

The output folder is Hub-ready like train.py's: averaged weights, config and code, tokenizer, the translation
generation defaults, and, with --data_dir, the validation and test scores (beam search, sacreBLEU, fp32) in
eval_results.json and the model card. The run folder's validation curve and command are carried over.
"""

import argparse
import json
import shlex
import sys
from pathlib import Path

import torch
from transformers import GenerationConfig

import compare
from modeling import TransformerMTForConditionalGeneration
from modeling.modeling_transformer_mt import set_translation_defaults
from tokenizer import load_tokenizer
from transformer_en_de import data
from transformer_en_de.evaluation import ChrF, SacreBleu
from transformer_en_de.model_card import write_model_card


def average_checkpoints(checkpoints: list[Path]) -> TransformerMTForConditionalGeneration:
    models = [TransformerMTForConditionalGeneration.from_pretrained(path) for path in checkpoints]
    averaged = models[0]
    states = [model.state_dict() for model in models]
    with torch.no_grad():
        for name, tensor in averaged.state_dict().items():
            if tensor.is_floating_point():
                tensor.copy_(torch.stack([state[name] for state in states]).mean(dim=0))
    # Checkpoints carry the generation config the evaluation loop left behind: restore the translation defaults.
    averaged.config.use_cache = True  # the Trainer saved checkpoints with the cache turned off
    averaged.generation_config = GenerationConfig()
    set_translation_defaults(averaged.generation_config, averaged.config)
    return averaged


def score_split(folder: Path, data_dir: Path, split: str) -> dict:
    sources, references = data.read_parallel(*data.split_paths(data_dir, split, "en", "de"))
    row = compare.score_model(str(folder), sources, references, num_beams=4, length_penalty=0.6)
    if row["error"]:
        raise SystemExit(f"error: {row['error']}")
    translations = row["translations"]
    return {"bleu": row["bleu"], "chrf": row["chrf"], "num_sentences": len(sources), "num_beams": 4,
            "length_penalty": 0.6,
            "bleu_signature": SacreBleu().compute(predictions=translations, references=references)["signature"],
            "chrf_signature": ChrF().compute(predictions=translations, references=references)["signature"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoints", nargs="+", type=Path, help="checkpoint folders of one run")
    parser.add_argument("--output-dir", type=Path, required=True)
    parser.add_argument("--tokenizer", type=Path, default=None, help="default: the run folder of the first checkpoint")
    parser.add_argument("--data_dir", type=Path, default=None, help="score val and test_2016_flickr, write the card")
    args = parser.parse_args(argv)
    missing = [str(path) for path in args.checkpoints if not (path / "config.json").is_file()]
    if missing:
        print(f"error: not checkpoint folders (no config.json): {', '.join(missing)}", file=sys.stderr)
        return 2
    model = average_checkpoints(args.checkpoints)
    tokenizer = load_tokenizer(args.tokenizer or args.checkpoints[0].parent)
    model.save_pretrained(args.output_dir)
    tokenizer.save_pretrained(args.output_dir)
    print(f"averaged {len(args.checkpoints)} checkpoints into {args.output_dir}")
    if args.data_dir:
        run_dir = args.checkpoints[0].parent
        run_results_path = run_dir / "eval_results.json"
        run_results = json.loads(run_results_path.read_text()) if run_results_path.is_file() else {}
        results = {
            "num_parameters": model.num_parameters(),
            "averaged_checkpoints": [str(path) for path in args.checkpoints],
            "validation_curve": run_results.get("validation_curve", []),
            "validation": score_split(args.output_dir, args.data_dir, "val"),
            "test_2016_flickr": score_split(args.output_dir, args.data_dir, "test_2016_flickr"),
        }
        (args.output_dir / "eval_results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
        train_command = _train_command(run_dir)
        average_command = "python average_checkpoints.py " + shlex.join(argv or sys.argv[1:])
        command = "\n".join(filter(None, [train_command, average_command]))
        write_model_card(args.output_dir, config=model.config, results=results, test_split="test_2016_flickr",
                         command=command, averaged=[path.name for path in args.checkpoints])
        print(f"val {results['validation']['bleu']} BLEU, test_2016_flickr {results['test_2016_flickr']['bleu']} BLEU "
              f"/ {results['test_2016_flickr']['chrf']} chrF")
    return 0


def _train_command(run_dir: Path) -> str | None:
    """The training command recorded in the run folder's model card."""
    card = run_dir / "README.md"
    if not card.is_file():
        return None
    for line in card.read_text(encoding="utf-8").splitlines():
        if line.startswith("python train.py"):
            return line
    return None


if __name__ == "__main__":
    sys.exit(main())
