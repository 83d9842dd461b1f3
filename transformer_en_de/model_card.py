"""The model card (README.md) of a trained folder, built with huggingface_hub's card API: metadata with a
`model-index` (BLEU and chrF on the test split) and a body with the facts a user needs."""

from pathlib import Path

from huggingface_hub import EvalResult, ModelCard, ModelCardData

CARD_TEMPLATE = """\
---
{{ card_data }}
---

# {{ model_name }}

An English→German Transformer (Vaswani et al. 2017, "Attention Is All You Need") written from scratch in PyTorch
and trained on Multi30k only. It loads with `transformers` (custom code, `trust_remote_code=True`).

| | |
|---|---|
| parameters | {{ "{:,}".format(num_parameters) }} |
| layers (encoder + decoder) | {{ config.encoder_layers }} + {{ config.decoder_layers }} |
| d_model / heads / d_ff | {{ config.d_model }} / {{ config.num_attention_heads }} / {{ config.d_ff }} |
| dropout | {{ config.dropout }} |
| normalisation | {{ config.norm_placement }}-norm |
| vocabulary | {{ config.vocab_size }} joint byte-level BPE tokens, shared embeddings and output projection |
| max length | {{ config.max_position_embeddings }} tokens (source and target) |

## Results

{% if test %}Multi30k {{ test_split }} ({{ test.num_sentences }} sentences), beam search (beams {{ test.num_beams }}, length
penalty {{ test.length_penalty }}), detokenised cased sacreBLEU:

| BLEU | chrF |
|---|---|
| {{ test.bleu }} | {{ test.chrf }} |

Signatures: `{{ test.bleu_signature }}`, `{{ test.chrf_signature }}`.
{% else %}No test split was scored in this run.
{% endif %}
{% if curve %}Validation (Multi30k val, beam search) after each evaluation:

| epoch | step | loss | BLEU | chrF |
|---|---|---|---|---|
{% for point in curve %}| {{ point.epoch }} | {{ point.step }} | {{ point.loss }} | {{ point.bleu }} | {{ point.chrf }} |
{% endfor %}{% endif %}
## Use

```python
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

model_id = "{{ model_id }}"
tokenizer = AutoTokenizer.from_pretrained(model_id, trust_remote_code=True)
model = AutoModelForSeq2SeqLM.from_pretrained(model_id, trust_remote_code=True)
batch = tokenizer(["A man is riding a bicycle down the street."], return_tensors="pt")
print(tokenizer.batch_decode(model.generate(**batch), skip_special_tokens=True))
```

`generate()` defaults to the paper's decoding (beam 4, length penalty 0.6); pass `num_beams=1` for greedy.

## Training

Trained with the project's `train.py` (Seq2SeqTrainer; Adam β=(0.9, 0.98), ε=1e-9, linear warm-up then inverse
square root decay, label smoothing {{ config.label_smoothing }}, gradient clipping, bf16 autocast), selecting the
{% if averaged %}checkpoint with the best validation BLEU, then averaging the weights of checkpoints {{ averaged | join(", ") }}
(the paper averages its last checkpoints; chosen because it scored higher on validation):{% else %}checkpoint with the best
validation BLEU:{% endif %}

```bash
{{ command }}
```

## Data

[Multi30k](https://github.com/multi30k/dataset) task 1 (Elliott et al. 2016): 29,000 English–German image-caption
pairs for training, 1,014 for validation, 1,000 for test (test_2016_flickr). The data is partially derived from
Flickr30K and is provided for non-commercial research and educational purposes; this model inherits those terms.
Please cite Elliott et al. 2016, "Multi30K: Multilingual English-German Image Descriptions".

## Intended use and limitations

- Intended for learning, research and demonstration: a faithful, small implementation of the paper's model.
- The training domain is short, literal descriptions of photographs. Outside it — news, dialogue, technical text,
  long or complex sentences — translations degrade quickly; a general-purpose system such as MarianMT
  (`Helsinki-NLP/opus-mt-en-de`, trained on far more data) is much better there.
- Sentences longer than {{ config.max_position_embeddings }} tokens must be split or truncated.
- Multi30k captions carry the biases of their source images and annotators (e.g. gendered descriptions); the model
  reproduces them.
- Scores are on Multi30k test_2016_flickr, in-domain; they do not measure general translation quality.
"""


def write_model_card(
    folder: str | Path,
    *,
    config,
    results: dict,
    test_split: str,
    command: str,
    hub_model_id: str | None = None,
    averaged: list[str] | None = None,
) -> ModelCard:
    """Write `folder/README.md` and return the card."""
    folder = Path(folder)
    model_name = (hub_model_id or folder.name).split("/")[-1]
    test = results.get(test_split)
    eval_results = None
    if test:
        common = dict(
            task_type="translation",
            task_name="Translation English→German",
            dataset_type="multi30k",
            dataset_name=f"Multi30k ({test_split})",
            dataset_split="test",
            dataset_config="en-de",
        )
        eval_results = [
            EvalResult(metric_type="bleu", metric_name="sacreBLEU", metric_value=test["bleu"], **common),
            EvalResult(metric_type="chrf", metric_name="chrF", metric_value=test["chrf"], **common),
        ]
    card_data = ModelCardData(
        language=["en", "de"],
        license="cc-by-nc-4.0",
        library_name="transformers",
        pipeline_tag="translation",
        tags=["translation", "transformer", "from-scratch", "multi30k", "custom_code"],
        datasets=["multi30k"],
        metrics=["bleu", "chrf"],
        model_name=model_name,
        eval_results=eval_results,
    )
    card = ModelCard.from_template(
        card_data,
        template_str=CARD_TEMPLATE,
        model_name=model_name,
        model_id=hub_model_id or str(folder),
        config=config,
        num_parameters=results.get("num_parameters", 0),
        test=test,
        test_split=test_split,
        curve=results.get("validation_curve", []),
        command=command,
        averaged=averaged,
    )
    card.save(folder / "README.md")
    return card
