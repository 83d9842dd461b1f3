"""The model card (README.md) of a trained folder, built with huggingface_hub's card API from the folder's
eval_results.json (`evaluation.read_eval_results`): metadata with a `model-index` (BLEU and chrF on each scored split
but validation) and a body with the facts a user needs."""

from pathlib import Path
from typing import NamedTuple

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from ..data import MULTI30K_HUB_ID
from ..decoding.loading import display_id
from ..evaluation import read_eval_results, validation_split_of
from ..markdown import markdown_table

LANGUAGE_NAMES = {"en": "English", "de": "German", "fr": "French", "cs": "Czech"}

CARD_TEMPLATE = """\
---
{{ card_data }}
---

# {{ model_name }}

{{ article }} {{ direction }} ({{ pair }}) Transformer (Vaswani et al. 2017, "Attention Is All You Need") written from scratch in
PyTorch and trained on {{ dataset_title ~ " only" if corpora|length <= 1 else dataset_title ~ " and the corpora below" }}. It loads with `transformers>=5.10.4,<6` (custom code, `trust_remote_code=True`).

{{ tables.architecture }}
{% if shape %}
{{ shape.why }}{% if shape.speed %} Measured ({{ shape.speed.cpu }}), `generate()` with each model's own decoding, one
thread, each model in its own process: {{ shape.speed.batch_32 }}× the sentences a second of {{ shape.speed.reference }}
in batches of 32 and {{ shape.speed.batch_1 }}× one sentence at a time (`{{ shape.speed.command }}`).{% endif %}
{% endif %}
## Results

{% if scores %}{{ dataset_title }}, every sentence of each split in file order, translated with the model's own decoding ({% if decoding.num_beams > 1 %}beam {{ decoding.num_beams }},
length penalty {{ decoding.length_penalty }}{% else %}greedy{% endif %}, at most {{ decoding.max_new_tokens_ratio }} × source tokens + {{ decoding.max_new_tokens_offset }} new tokens, cap {{ decoding.max_new_tokens }}), detokenised cased sacreBLEU:

{{ tables.scores }}

Signatures: `{{ signatures.bleu }}`, `{{ signatures.chrf }}`. The model was chosen on {{ validation_split }} only.
{% else %}No split was scored in this run.
{% endif %}
{% if candidates %}Checkpoint averages tried (validation BLEU; the best one is this model):

{{ tables.candidates }}

{% endif %}{% if curve %}Validation during training ({{ dataset_title }} {{ validation_split }}, every sentence through the same engine and decoding) after each evaluation:

{{ tables.curve }}
{% endif %}
## Use

```python
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

model_id = "{{ model_id }}"
tokenizer = AutoTokenizer.from_pretrained(model_id, trust_remote_code=True)
model = AutoModelForSeq2SeqLM.from_pretrained(model_id, trust_remote_code=True)
batch = tokenizer(["{{ example }}"], return_tensors="pt")
print(tokenizer.batch_decode(model.generate(**batch), skip_special_tokens=True))
```

`generate()` defaults to {% if decoding.num_beams > 1 %}beam search ({{ decoding.num_beams }} beams, length penalty {{ decoding.length_penalty }}; the paper: 4 and 0.6){% else %}greedy search (the paper: beam search with 4 beams, length penalty 0.6){% endif %} with each sentence bounded by its source
length (`max_new_tokens_ratio`, `max_new_tokens_offset` in the generation config); pass {% if decoding.num_beams > 1 %}`num_beams=1` for greedy{% else %}`num_beams=4` for beam search{% endif %}.
This needs `transformers>=5.10.4,<6` (5.10.4, 5.15.1, 5.17.0, 5.20.2, 5.23.0 and 5.24.0 run; older releases stop at loading with one line naming the version). Version 5 has no `translation` pipeline (`pipeline("translation")` was removed): call
`generate()` as above.

## Training

Trained with the project's `train.py` (Seq2SeqTrainer; Adam β=(0.9, 0.98), ε=1e-9, linear warm-up then inverse
square root decay, label smoothing {{ config.label_smoothing }}, gradient clipping, bf16 autocast){% if averaged and averaged | length > 1 %}, then averaging
the weights of checkpoints {{ averaged | join(", ") }} (the paper averages its last checkpoints; chosen on validation BLEU){% elif averaged %}, then
keeping {{ averaged[0] }} alone: it scored higher on validation BLEU than the averages of the last checkpoints{% else %}, keeping the
checkpoint with the best validation BLEU{% endif %}.{% if case_augmentation %} Case augmentation: {{ case_augmentation }} of the
training pairs were added again with the English source in upper case or lower case and the German target as written,
so that all-caps or lower-case input translates like normal text.{% endif %}{% if teacher %} Word-level distillation: at every
target position the model also learned the next-token probabilities of the model {{ teacher }} (Hinton et al. 2015), the loss
(1 - {{ teacher_weight }}) × cross-entropy + {{ teacher_weight }} × KL(teacher ‖ model).{% endif %}
{% if corpora|length > 1 %}
Training corpora (pairs after cleaning; weight = times each pair is seen per epoch):

{{ tables.corpora }}

{% if corpora|selectattr("tag")|list %}
Tagged sources start with the reserved token {{ tag_token }} (tagged back-translation, Caswell et al. 2019): the model
tells synthetic sources from real ones; never put the tag in front of real input.
{% endif %}
{% endif %}
```bash
{{ command }}
```

## Data

{% if multi30k %}[Multi30k](https://github.com/multi30k/dataset) task 1 (Elliott et al. 2016), on the Hub as
[{{ dataset_id }}](https://huggingface.co/datasets/{{ dataset_id }}): 29,000 English–German image-caption
pairs{% if source != "en" %} (read {{ direction }} here){% endif %} for training, 1,014 for validation, 1,000 for test (test_2016_flickr). The data is partially derived from
Flickr30K and is provided for non-commercial research and educational purposes; this model inherits those terms.
Please cite Elliott et al. 2016, "Multi30K: Multilingual English-German Image Descriptions".
{% else %}[{{ dataset_id }}]({{ dataset_url }}){% if dataset_config %} (configuration `{{ dataset_config }}`){% endif %}: the
training split{% if train_pairs %} ({{ "{:,}".format(train_pairs) }} pairs after cleaning){% endif %}, validation on `{{ validation_split }}`{% if test_split %}, test on `{{ test_split }}`{% endif %}. The dataset's
own terms of use apply; see its page.
{% endif %}
## Intended use and limitations

- Intended for learning, research and demonstration: a faithful, small implementation of the paper's model.
{% if multi30k %}- The training domain is short, literal descriptions of photographs. Outside it — news, dialogue, technical text,
  long or complex sentences — translations degrade quickly; a general-purpose system such as MarianMT
  (`Helsinki-NLP/opus-mt-{{ source }}-{{ target }}`, trained on far more data) is much better there.
{% else %}- Outside the domain of its training data translations degrade; compare with a general-purpose system such as
  MarianMT (`Helsinki-NLP/opus-mt-{{ source }}-{{ target }}`) before relying on it.
{% endif %}- Sentences longer than {{ config.max_position_embeddings }} tokens must be split or truncated.
{% if multi30k %}- Multi30k captions carry the biases of their source images and annotators (e.g. gendered descriptions); the model
  reproduces them.
{% else %}- The model reproduces the biases of its training data.
{% endif %}- Scores are on {{ dataset_title }}; they do not measure translation quality in general.

## Citation

```bibtex
@inproceedings{vaswani2017attention,
  title     = {Attention Is All You Need},
  author    = {Vaswani, Ashish and Shazeer, Noam and Parmar, Niki and Uszkoreit, Jakob and Jones, Llion and
               Gomez, Aidan N. and Kaiser, Łukasz and Polosukhin, Illia},
  booktitle = {Advances in Neural Information Processing Systems},
  volume    = {30},
  year      = {2017}
}
{% if shape %}
@inproceedings{kasai2021deep,
  title     = {Deep Encoder, Shallow Decoder: Reevaluating Non-autoregressive Machine Translation},
  author    = {Kasai, Jungo and Pappas, Nikolaos and Peng, Hao and Cross, James and Smith, Noah A.},
  booktitle = {International Conference on Learning Representations},
  year      = {2021}
}
{% endif %}{% if multi30k %}
@inproceedings{elliott2016multi30k,
  title     = {Multi30K: Multilingual {E}nglish-{G}erman Image Descriptions},
  author    = {Elliott, Desmond and Frank, Stella and Sima'an, Khalil and Specia, Lucia},
  booktitle = {Proceedings of the 5th Workshop on Vision and Language},
  pages     = {70--74},
  year      = {2016}
}
{% elif wmt14 %}
@inproceedings{bojar2014findings,
  title     = {Findings of the 2014 Workshop on Statistical Machine Translation},
  author    = {Bojar, Ondřej and Buck, Christian and Federmann, Christian and Haddow, Barry and Koehn, Philipp and
               Leveling, Johannes and Monz, Christof and Pecina, Pavel and Post, Matt and Saint-Amand, Herve and
               Soricut, Radu and Specia, Lucia and Tamchyna, Aleš},
  booktitle = {Proceedings of the Ninth Workshop on Statistical Machine Translation},
  pages     = {12--58},
  year      = {2014}
}
{% endif %}```
"""


class TrainedOn(NamedTuple):
    """The dataset a model was trained on, as its eval_results.json names it."""

    entry: dict  # eval_results.json's training.dataset
    id: str
    config: str | None
    multi30k: bool
    title: str  # how the card names it


def trained_on(results: dict) -> TrainedOn:
    entry = results["training"].get("dataset") or {"name": MULTI30K_HUB_ID}  # files written before the field: Multi30k
    dataset_id, config = entry["name"], entry.get("config")
    multi30k = dataset_id == MULTI30K_HUB_ID
    title = "Multi30k" if multi30k else f"{dataset_id}{f' {config}' if config else ''}"
    return TrainedOn(entry, dataset_id, config, multi30k, title)


def hub_metadata(results: dict, model_name: str, direction: str, dataset: TrainedOn) -> ModelCardData:
    """The card's metadata the Hub reads: languages, license, tags, and each test score but validation's as an
    `EvalResult` (the Hub's model-index)."""
    source, target = results["languages"]["source"], results["languages"]["target"]
    validation_split = validation_split_of(results)
    common = dict(
        task_type="translation",
        task_name=f"Translation {direction}",
        dataset_type=dataset.id,
        dataset_config=dataset.config or f"{source}-{target}",
    )
    eval_results = [
        EvalResult(
            metric_type=metric,
            metric_name=name,
            metric_value=score[metric],
            dataset_name=f"{dataset.title} ({split})",
            dataset_split=split if not dataset.multi30k else "test",
            **common,
        )
        for split, score in results["scores"].items()
        if split != validation_split
        for metric, name in (("bleu", "sacreBLEU"), ("chrf", "chrF"))
    ] or None
    return ModelCardData(
        language=[source, target],
        license="cc-by-nc-4.0" if dataset.multi30k else "other",
        library_name="transformers",
        pipeline_tag="translation",
        tags=["translation", "transformer", "from-scratch", *(["multi30k"] if dataset.multi30k else []), "custom_code"],
        datasets=[dataset.id],
        metrics=["bleu", "chrf"],
        model_name=model_name,
        eval_results=eval_results,
    )


class Shape(NamedTuple):
    """Why a model's encoder is deeper than its decoder, and (where eval_results.json keeps one) what it measured."""

    why: str
    speed: dict | None  # training["speed"]: reference, cpu, batch_32, batch_1, command


def shape_of(results: dict, config) -> Shape | None:
    """The card's paragraph on a deep encoder with a shallow decoder; None for the paper's even split."""
    encoder, decoder = config.encoder_layers, config.decoder_layers
    if decoder >= encoder:
        return None
    layers = "one layer" if decoder == 1 else f"{decoder} layers"
    why = (
        f"Why {encoder} + {decoder}: a deep encoder and a shallow decoder (Kasai et al. 2021). The encoder reads the "
        f"source once per sentence; the decoder runs again for every generated token of every beam, so most of "
        f"generation's time is the decoder and the output projection. Layers moved from the decoder to the encoder keep "
        f"most of the quality and make every decoding step cheaper; the decoder here has {layers}."
    )
    return Shape(why, results["training"].get("speed"))


def card_tables(results: dict, config) -> dict[str, str]:
    """The card's tables, each through the one Markdown table writer: the architecture, the scores, the checkpoint
    averages tried, the validation curve and the training corpora (empty where the results have none)."""
    training = results["training"]
    validation_split, chosen = validation_split_of(results), training.get("chosen_average")
    architecture = [
        ["parameters", f"{results['num_parameters']:,}"],
        ["layers (encoder + decoder)", f"{config.encoder_layers} + {config.decoder_layers}"],
        ["d_model / heads / d_ff", f"{config.d_model} / {config.num_attention_heads} / {config.d_ff}"],
        ["dropout", config.dropout],
        ["normalisation", f"{config.norm_placement}-norm"],
        ["vocabulary", f"{config.vocab_size} joint byte-level BPE tokens, shared embeddings and output projection"],
        ["max length", f"{config.max_position_embeddings} tokens (source and target)"],
    ]
    scores = [
        [
            f"{split}{' (validation)' if split == validation_split else ''}",
            score["num_sentences"],
            score["bleu"],
            score["chrf"],
        ]
        for split, score in results["scores"].items()
    ]
    candidates = [
        [
            f"{c['name']}{' ✓' if c['name'] == chosen else ''}",
            ", ".join(map(str, c["checkpoints"])),
            c["validation"]["bleu"],
            c["validation"]["chrf"],
        ]
        for c in training.get("average_candidates", [])
    ]
    curve = [[p["epoch"], p["step"], p["loss"], p["bleu"], p["chrf"]] for p in training.get("validation_curve", [])]
    corpora = [[c["name"], c["pairs"], c["weight"], c.get("tag") or ""] for c in training.get("corpora", [])]
    return {
        "architecture": markdown_table(["", ""], architecture),
        "scores": markdown_table(["split", "sentences", "BLEU", "chrF"], scores) if scores else "",
        "candidates": markdown_table(["candidate", "checkpoints", "BLEU", "chrF"], candidates) if candidates else "",
        "curve": markdown_table(["epoch", "step", "loss", "BLEU", "chrF"], curve) if curve else "",
        "corpora": markdown_table(["corpus", "pairs", "weight", "tagged"], corpora) if corpora else "",
    }


def write_model_card(
    folder: str | Path,
    *,
    config,
    hub_model_id: str | None = None,
) -> ModelCard:
    """Write `folder/README.md` from `folder/eval_results.json` and the model config; return the card."""
    folder = Path(folder)
    results = read_eval_results(folder)
    if results is None:
        raise FileNotFoundError(f"No eval_results.json in {folder}: write it (evaluation.write_eval_results) first.")
    # On the Hub the card names the repo and loads from it; a local card names the folder, never a local path.
    model_name = hub_model_id or folder.name
    source, target = results["languages"]["source"], results["languages"]["target"]
    direction = f"{LANGUAGE_NAMES.get(source, source)}→{LANGUAGE_NAMES.get(target, target)}"
    training = results["training"]
    validation_split = validation_split_of(results)
    scores = results["scores"]
    dataset = trained_on(results)
    card_data = hub_metadata(results, model_name, direction, dataset)
    first_score = next(iter(scores.values()), {})
    examples = {
        "en": "A man is riding a bicycle down the street.",
        "de": "Ein Mann fährt mit dem Fahrrad die Straße hinunter.",
    }
    card = ModelCard.from_template(
        card_data,
        template_str=CARD_TEMPLATE,
        model_name=model_name,
        model_id=model_name,
        dataset_id=dataset.id,
        dataset_url=(f"https://huggingface.co/datasets/{dataset.id}" if not Path(dataset.id).exists() else dataset.id),
        dataset_config=dataset.config,
        dataset_title=dataset.title,
        multi30k=dataset.multi30k,
        wmt14=dataset.id.split("/")[-1].lower() == "wmt14",
        train_pairs=next(iter(training.get("corpora", [])), {}).get("pairs"),
        test_split=dataset.entry.get("test_split"),
        article="An" if direction[0] in "AEIOU" else "A",
        direction=direction,
        pair=f"{source}→{target}",
        source=source,
        target=target,
        example=examples.get(source, examples["en"]),
        config=config,
        tables=card_tables(results, config),
        shape=shape_of(results, config),
        decoding=results["decoding"],
        scores=scores,
        signatures={"bleu": first_score.get("bleu_signature"), "chrf": first_score.get("chrf_signature")},
        validation_split=validation_split,
        curve=training.get("validation_curve", []),
        candidates=training.get("average_candidates", []),
        averaged=training.get("averaged_checkpoints"),
        corpora=training.get("corpora", []),
        tag_token=training.get("tag_token", ""),
        case_augmentation=training.get("case_augmentation"),
        teacher=display_id(training.get("teacher") or ""),
        teacher_weight=training.get("teacher_weight"),
        command="\n".join(results["command"]),
    )
    card.save(folder / "README.md")
    return card


if __name__ == "__main__":  # python -m transformer_en_de.publishing.model_card FOLDER: the card anew from the record
    import argparse

    from transformers import AutoConfig

    parser = argparse.ArgumentParser(description="Write FOLDER/README.md anew from FOLDER/eval_results.json.")
    parser.add_argument("folder", type=Path, help="a saved model folder with an eval_results.json")
    folder = parser.parse_args().folder
    write_model_card(folder, config=AutoConfig.from_pretrained(folder, trust_remote_code=True, local_files_only=True))
    print(f"wrote {folder / 'README.md'}")
