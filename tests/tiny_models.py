"""A tiny random T5 (with its English→German task prefix) built and saved locally, for the app's second architecture.

Like `tiny_marian.build_tiny_marian`: a small SentencePiece model trained here on sentences written for the tests
(T5's special ids: <pad> 0, </s> 1, <unk> 2), a `T5Config` with d_model 16 and 1+1 layers whose
`task_specific_params["translation_en_to_de"]["prefix"]` is T5's "translate English to German: ", saved with
`save_pretrained`. It loads offline with the Auto classes. Takes well under a second.
"""

import io
from pathlib import Path

import sentencepiece as spm
import torch
from tiny_marian import _ENGLISH, _GERMAN
from transformers import GenerationConfig, T5Config, T5ForConditionalGeneration, T5Tokenizer

T5_PREFIX = "translate English to German: "


def build_tiny_t5(folder: Path) -> Path:
    """Build and save a tiny random T5 model + tokenizer into `folder`; return `folder`."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model_bytes = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter((_ENGLISH + _GERMAN + [T5_PREFIX]) * 5),
        model_writer=model_bytes,
        vocab_size=120,
        model_type="unigram",
        character_coverage=1.0,
        pad_id=0,
        eos_id=1,
        unk_id=2,
        bos_id=-1,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    # transformers 5 builds T5's Unigram tokenizer from (piece, score) pairs: <pad> 0, </s> 1, <unk> 2 first.
    processor = spm.SentencePieceProcessor(model_proto=model_bytes.getvalue())
    vocab = [(processor.id_to_piece(i), processor.get_score(i)) for i in range(processor.get_piece_size())]
    tokenizer = T5Tokenizer(vocab=vocab, extra_ids=0, model_max_length=64)
    tokenizer.save_pretrained(folder)

    config = T5Config(
        vocab_size=len(tokenizer),
        d_model=16,
        d_kv=8,
        d_ff=32,
        num_layers=1,
        num_decoder_layers=1,
        num_heads=2,
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=0,
        # Wide weights, as in the tiny Marian: the (meaningless) output then depends on the source.
        initializer_factor=30.0,
        task_specific_params={"translation_en_to_de": {"prefix": T5_PREFIX}},
    )
    torch.manual_seed(0)
    model = T5ForConditionalGeneration(config).eval()
    model.generation_config = GenerationConfig(
        decoder_start_token_id=0,
        pad_token_id=0,
        eos_token_id=1,
        bad_words_ids=[[0], [2]],  # <pad> and <unk> decode to nothing; banned, the translations are never empty
    )
    model.save_pretrained(folder)
    return folder
