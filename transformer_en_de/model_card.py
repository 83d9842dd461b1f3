"""The model card (README.md) of a trained folder, built with huggingface_hub's card API from the folder's
eval_results.json (`evaluation.read_eval_results`): metadata with a `model-index` (BLEU and chrF on each scored split
but validation) and a body with the facts a user needs."""

from pathlib import Path

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from .evaluation import read_eval_results

LANGUAGE_NAMES = {"en": "English", "de": "German", "fr": "French", "cs": "Czech"}

CARD_TEMPLATE = """\
---
{{ card_data }}
---

# {{ model_name }}

{{ article }} {{ direction }} ({{ pair }}) Transformer (Vaswani et al. 2017, "Attention Is All You Need") written from scratch in
PyTorch and trained on {{ "Multi30k only" if corpora|length <= 1 else "Multi30k and the corpora below" }}. It loads with `transformers` (custom code, `trust_remote_code=True`).

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

{% if scores %}Multi30k, every sentence of each split in file order, translated with the model's own decoding (beam {{ decoding.num_beams }},
length penalty {{ decoding.length_penalty }}, at most {{ decoding.max_new_tokens_ratio }} × source tokens + {{ decoding.max_new_tokens_offset }} new tokens, cap {{ decoding.max_new_tokens }}), detokenised cased sacreBLEU:

| split | sentences | BLEU | chrF |
|---|---|---|---|
{% for split, score in scores.items() %}| {{ split }}{{ " (validation)" if split == validation_split else "" }} | {{ score.num_sentences }} | {{ score.bleu }} | {{ score.chrf }} |
{% endfor %}
Signatures: `{{ signatures.bleu }}`, `{{ signatures.chrf }}`. The model was chosen on {{ validation_split }} only.
{% else %}No split was scored in this run.
{% endif %}
{% if candidates %}Checkpoint averages tried (validation BLEU; the best one is this model):

| candidate | checkpoints | BLEU | chrF |
|---|---|---|---|
{% for c in candidates %}| {{ c.name }}{{ " ✓" if c.name == chosen else "" }} | {{ c.checkpoints | join(", ") }} | {{ c.validation.bleu }} | {{ c.validation.chrf }} |
{% endfor %}
{% endif %}{% if curve %}Validation during training (Multi30k {{ validation_split }}, the Trainer's beam search) after each evaluation:

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
batch = tokenizer(["{{ example }}"], return_tensors="pt")
print(tokenizer.batch_decode(model.generate(**batch), skip_special_tokens=True))
```

`generate()` defaults to the paper's decoding (beam 4, length penalty 0.6) with each sentence bounded by its source
length (`max_new_tokens_ratio`, `max_new_tokens_offset` in the generation config); pass `num_beams=1` for greedy.

## Training

Trained with the project's `train.py` (Seq2SeqTrainer; Adam β=(0.9, 0.98), ε=1e-9, linear warm-up then inverse
square root decay, label smoothing {{ config.label_smoothing }}, gradient clipping, bf16 autocast){% if averaged %}, then averaging
the weights of checkpoints {{ averaged | join(", ") }} (the paper averages its last checkpoints; chosen on validation BLEU){% else %}, keeping the
checkpoint with the best validation BLEU{% endif %}.{% if case_augmentation %} Case augmentation: {{ case_augmentation }} of the
training pairs were added again in upper case or lower case (source and target alike), so that all-caps or lower-case
input translates like normal text.{% endif %}
{% if corpora|length > 1 %}
Training corpora (pairs after cleaning; weight = times each pair is seen per epoch):

| corpus | pairs | weight | tagged |
|---|---|---|---|
{% for c in corpora %}| {{ c.name }} | {{ c.pairs }} | {{ c.weight }} | {{ c.tag or "" }} |
{% endfor %}
Tagged sources start with the reserved token {{ tag_token }} (tagged back-translation, Caswell et al. 2019): the model
tells synthetic sources from real ones; never put the tag in front of real input.
{% endif %}
```bash
{{ command }}
```

## Data

[Multi30k](https://github.com/multi30k/dataset) task 1 (Elliott et al. 2016): 29,000 English–German image-caption
pairs{% if source != "en" %} (read {{ direction }} here){% endif %} for training, 1,014 for validation, 1,000 for test (test_2016_flickr). The data is partially derived from
Flickr30K and is provided for non-commercial research and educational purposes; this model inherits those terms.
Please cite Elliott et al. 2016, "Multi30K: Multilingual English-German Image Descriptions".

## Intended use and limitations

- Intended for learning, research and demonstration: a faithful, small implementation of the paper's model.
- The training domain is short, literal descriptions of photographs. Outside it — news, dialogue, technical text,
  long or complex sentences — translations degrade quickly; a general-purpose system such as MarianMT
  (`Helsinki-NLP/opus-mt-{{ source }}-{{ target }}`, trained on far more data) is much better there.
- Sentences longer than {{ config.max_position_embeddings }} tokens must be split or truncated.
- Multi30k captions carry the biases of their source images and annotators (e.g. gendered descriptions); the model
  reproduces them.
- Scores are on Multi30k, in-domain; they do not measure general translation quality.
"""


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
    model_name = (hub_model_id or folder.name).split("/")[-1]
    source, target = results["languages"]["source"], results["languages"]["target"]
    direction = f"{LANGUAGE_NAMES.get(source, source)}→{LANGUAGE_NAMES.get(target, target)}"
    training = results["training"]
    validation_split = training.get("validation_split", "val")
    scores = results["scores"]
    common = dict(
        task_type="translation",
        task_name=f"Translation {direction}",
        dataset_type="multi30k",
        dataset_config=f"{source}-{target}",
    )
    eval_results = [
        EvalResult(metric_type=metric, metric_name=name, metric_value=score[metric],
                   dataset_name=f"Multi30k ({split})", dataset_split="test", **common)
        for split, score in scores.items()
        if split != validation_split
        for metric, name in (("bleu", "sacreBLEU"), ("chrf", "chrF"))
    ] or None
    card_data = ModelCardData(
        language=[source, target],
        license="cc-by-nc-4.0",
        library_name="transformers",
        pipeline_tag="translation",
        tags=["translation", "transformer", "from-scratch", "multi30k", "custom_code"],
        datasets=["multi30k"],
        metrics=["bleu", "chrf"],
        model_name=model_name,
        eval_results=eval_results,
    )
    first_score = next(iter(scores.values()), {})
    examples = {"en": "A man is riding a bicycle down the street.", "de": "Ein Mann fährt mit dem Fahrrad die Straße hinunter."}
    card = ModelCard.from_template(
        card_data,
        template_str=CARD_TEMPLATE,
        model_name=model_name,
        model_id=hub_model_id or str(folder),
        article="An" if direction[0] in "AEIOU" else "A",
        direction=direction,
        pair=f"{source}→{target}",
        source=source,
        target=target,
        example=examples.get(source, examples["en"]),
        config=config,
        num_parameters=results["num_parameters"],
        decoding=results["decoding"],
        scores=scores,
        signatures={"bleu": first_score.get("bleu_signature"), "chrf": first_score.get("chrf_signature")},
        validation_split=validation_split,
        curve=training.get("validation_curve", []),
        candidates=training.get("average_candidates", []),
        chosen=training.get("chosen_average"),
        averaged=training.get("averaged_checkpoints"),
        corpora=training.get("corpora", []),
        tag_token=training.get("tag_token", ""),
        case_augmentation=training.get("case_augmentation"),
        command="\n".join(results["command"]),
    )
    card.save(folder / "README.md")
    return card
