"""A deep-encoder, shallow-decoder starting point made from a trained model folder, for `train.py --model_name_or_path`.

    python recipes/deep_shallow_init.py models/transformer-en-de runs/init-6x1 --encoder_layers 6 --decoder_layers 1

The encoder runs once per sentence and the decoder once per generated token, so capacity moved from the decoder to the
encoder is cheap at decoding time (Kasai et al. 2021, "Deep Encoder, Shallow Decoder"). Rather than train such a model
from random weights (hours on a CPU), this starts it from the trained one:
- the encoder's layers are stacked: the trained layers, then copies of them again from the bottom (Gong et al. 2019,
  "Efficient Training of BERT by Progressively Stacking": a stacked model starts near the trained one and trains on);
- the decoder keeps the trained layers spread evenly over its depth, the first always (Shleifer and Rush 2020,
  "Pre-trained Summarization Distillation": shrink, then fine-tune; one layer keeps layer 0).
Embeddings, positions, the output projection and the generation config are taken as they are, but for `--num_beams`:
the beams the new model decodes with by default (a one- or two-layer decoder can lose nothing with two beams where the
trained model needed four, and decodes faster still; choose on val). Fine-tune the result on the distillation data
(recipes/deep_shallow.sh).
"""

import argparse
import copy
from pathlib import Path

from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, GenerationConfig


def kept_decoder_layers(trained: int, kept: int) -> list[int]:
    """Indices of the trained decoder layers a shallower decoder keeps: evenly spread, the first always."""
    if not 1 <= kept <= trained:
        raise SystemExit(f"error: --decoder_layers {kept}: give 1 to {trained} (the trained model has {trained}).")
    if kept == 1:
        return [0]
    step = (trained - 1) / (kept - 1)
    return [round(i * step) for i in range(kept)]


def stacked_encoder_layers(trained: int, wanted: int) -> list[int]:
    """Indices of the trained encoder layers each layer of a deeper encoder starts from: the stack repeated."""
    if wanted < trained:
        raise SystemExit(f"error: --encoder_layers {wanted}: give at least {trained} (the trained model's depth).")
    return [i % trained for i in range(wanted)]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="a trained model folder of the project")
    parser.add_argument("output_dir", help="where the new model folder is written (must not exist)")
    parser.add_argument("--encoder_layers", type=int, default=6)
    parser.add_argument("--decoder_layers", type=int, default=1)
    parser.add_argument(
        "--num_beams",
        type=int,
        default=None,
        help="the new model's default beam width (its generation config); default the trained model's",
    )
    args = parser.parse_args(argv)
    if args.num_beams is not None and args.num_beams < 1:
        parser.error(f"--num_beams {args.num_beams}: give 1 (greedy) or more")
    output = Path(args.output_dir)
    if output.exists():
        raise SystemExit(f"error: {output} exists: give a new folder.")

    trained = AutoModelForSeq2SeqLM.from_pretrained(args.model, trust_remote_code=True)
    config = copy.deepcopy(trained.config)
    encoder_from = stacked_encoder_layers(config.encoder_layers, args.encoder_layers)
    decoder_from = kept_decoder_layers(config.decoder_layers, args.decoder_layers)
    config.encoder_layers, config.decoder_layers = args.encoder_layers, args.decoder_layers
    model = type(trained)(config)

    state = trained.state_dict()
    new_state = {}
    for name in model.state_dict():
        source = name
        for side, taken in (("encoder", encoder_from), ("decoder", decoder_from)):
            prefix = f"model.{side}.layers."
            if name.startswith(prefix):
                index, rest = name[len(prefix) :].split(".", 1)
                source = f"{prefix}{taken[int(index)]}.{rest}"
        new_state[name] = state[source].clone()
    model.load_state_dict(new_state, strict=True)
    model.generation_config = copy.deepcopy(trained.generation_config)
    if args.num_beams is not None:
        model.generation_config.num_beams = args.num_beams
        if args.num_beams == 1:  # greedy: transformers refuses to save beam search's own settings beside one beam
            defaults = GenerationConfig()
            model.generation_config.early_stopping = defaults.early_stopping
            model.generation_config.length_penalty = defaults.length_penalty

    model.save_pretrained(output)
    AutoTokenizer.from_pretrained(args.model, trust_remote_code=True).save_pretrained(output)
    print(
        f"{output}: encoder layers from {encoder_from}, decoder layers from {decoder_from} of {args.model}, "
        f"{model.generation_config.num_beams} beams"
    )


if __name__ == "__main__":
    main()
