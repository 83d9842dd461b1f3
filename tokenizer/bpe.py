"""Train and load the joint BPE tokenizer.

Byte-level pre-tokenization with the full byte alphabet means every string — umlauts, ß, „quotes“, double spaces,
characters never seen in training — encodes and decodes back exactly; nothing maps to <unk>.

The tokenizers returned here save only what the tokenizer is: `transformers` would otherwise write into
tokenizer_config.json where it was loaded from (`is_local`, `local_files_only`) and, through the backend's
truncation/padding state kept in tokenizer.json, the `max_length` of the last call made during training.
"""

import types
from collections.abc import Iterable, Iterator
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

# Order fixes the ids: pad 0, bos 1, eos 2, unk 3 — the defaults of TransformerMTConfig.
SPECIAL_TOKENS = {"pad_token": "<pad>", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
# Set by from_pretrained (where the files came from) or read back from the backend's last truncation/padding (the
# arguments of one call): state of a session, not of the tokenizer, so never saved.
CALL_STATE_KWARGS = (
    "is_local",
    "local_files_only",
    "max_length",
    "stride",
    "truncation_strategy",
    "pad_to_multiple_of",
    "pad_token_type_id",
)
DEFAULT_SIDES = {"truncation_side": "right", "padding_side": "right"}  # dropped too when they are the defaults


def _lines(files: Iterable[str | Path]) -> Iterator[str]:
    """The lines of UTF-8 text files as every script reads them: LF, CRLF and a lone CR end a line alike (Python's
    universal newlines), and the break after the last line is optional."""
    for path in files:
        lines = Path(path).read_text(encoding="utf-8").split("\n")
        yield from lines[:-1] if lines[-1] == "" else lines


def train_tokenizer(
    texts: Iterable[str] | None = None,
    files: Iterable[str | Path] | None = None,
    vocab_size: int = 8000,
    min_frequency: int = 2,
    model_max_length: int = 256,
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE on `texts` (an iterator of sentences) and/or `files` (one sentence per line).

    Give it both sides of the parallel corpus: one vocabulary serves encoder, decoder and the tied output layer.
    """
    if texts is None and files is None:
        raise ValueError("train_tokenizer needs texts (an iterable of sentences) or files (paths, one per line).")
    files = [Path(path) for path in files or []]
    for path in files:
        if not path.is_file():
            raise FileNotFoundError(f"Tokenizer training file not found: {path}")
    special_tokens = list(SPECIAL_TOKENS.values())
    if vocab_size < 256 + len(special_tokens):
        raise ValueError(f"vocab_size must be at least {256 + len(special_tokens)} (bytes + special tokens).")

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=special_tokens,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )

    def corpus() -> Iterator[str]:
        if texts is not None:
            yield from texts
        yield from _lines(files)

    bpe.train_from_iterator(corpus(), trainer=trainer)
    # Every sequence (source and target) ends in </s>: the decoder learns to stop, the encoder sees the end.
    eos = SPECIAL_TOKENS["eos_token"]
    bpe.post_processor = processors.TemplateProcessing(
        single=f"$A {eos}", pair=f"$A {eos} $B {eos}", special_tokens=[(eos, bpe.token_to_id(eos))]
    )
    return _saving_cleanly(
        PreTrainedTokenizerFast(
            tokenizer_object=bpe,
            model_max_length=model_max_length,
            clean_up_tokenization_spaces=False,  # keep decoding exact: no space removal before punctuation
            **SPECIAL_TOKENS,
        )
    )


def forget_call_state(tokenizer):
    """Drop what loading and calling left behind (see CALL_STATE_KWARGS) from `tokenizer`; return it.

    Calls are unaffected: transformers sets the backend's truncation and padding again for every call that asks.
    """
    for key in CALL_STATE_KWARGS:
        tokenizer.init_kwargs.pop(key, None)
    for key, default in DEFAULT_SIDES.items():
        if tokenizer.init_kwargs.get(key) == default:
            tokenizer.init_kwargs.pop(key)
    tokenizer.backend_tokenizer.no_truncation()
    tokenizer.backend_tokenizer.no_padding()
    return tokenizer


def save_pretrained(self, *args, **kwargs):
    """`save_pretrained` of a tokenizer from this module: the class's, after `forget_call_state`."""
    forget_call_state(self)
    return type(self).save_pretrained(self, *args, **kwargs)


def _saving_cleanly(tokenizer):
    # Bound on the instance, so the tokenizer stays a plain PreTrainedTokenizerFast (loadable anywhere, with no code
    # of ours) whose saved files hold no call state. Named save_pretrained so that a pickled copy unpickles to one.
    tokenizer.save_pretrained = types.MethodType(save_pretrained, tokenizer)
    return forget_call_state(tokenizer)


def config_token_fields(tokenizer) -> dict:
    """The model config fields this tokenizer decides: vocabulary size and the special token ids."""
    return {
        "vocab_size": len(tokenizer),
        "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "decoder_start_token_id": tokenizer.bos_token_id,  # the target shifted right starts with <s>
    }


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerFast:
    """Load a saved tokenizer folder, with a clear error when it is not one."""
    path = Path(path)
    if not (path / "tokenizer.json").is_file():
        raise FileNotFoundError(f"No tokenizer at {path}: expected {path / 'tokenizer.json'} (train one first).")
    # The class itself, not AutoTokenizer: in a model folder AutoTokenizer reads config.json, whose auto_map makes it
    # ask on stdin whether to trust the modeling code, which a tokenizer does not need.
    return _saving_cleanly(PreTrainedTokenizerFast.from_pretrained(str(path)))
