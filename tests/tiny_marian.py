"""A tiny random MarianMT model and tokenizer built locally, standing in for Helsinki-NLP/opus-mt-en-de offline.

`build_tiny_marian(folder)` trains two small SentencePiece models (English source, German target) on sentences
written here, joins their pieces into one `vocab.json` the way Marian checkpoints do (`</s>` 0, `<unk>` 1, `<pad>`
last), builds a `MarianMTModel` with d_model 16 and 1+1 layers, and saves model and tokenizer with
`save_pretrained`. The folder loads offline with `MarianMTModel.from_pretrained` / `MarianTokenizer.from_pretrained`
(and the Auto classes). Takes well under a second.
"""

import io
import json
import tempfile
from pathlib import Path

import sentencepiece as spm
import torch
from transformers import GenerationConfig, MarianConfig, MarianMTModel, MarianTokenizer

_ENGLISH = [
    "A dog runs in the park.",
    "Two men are working on a roof.",
    "A girl in a red dress is smiling.",
    "The children play on the street.",
    "A woman reads a book in the garden.",
    "Three people ride bicycles down a hill.",
    "A man sings on a stage.",
    "The cat sleeps on the sofa.",
    "A boy jumps into the water.",
    "Two women are talking at a table.",
]
_GERMAN = [
    "Ein Hund rennt im Park.",
    "Zwei Männer arbeiten auf einem Dach.",
    "Ein Mädchen in einem roten Kleid lächelt.",
    "Die Kinder spielen auf der Straße.",
    "Eine Frau liest ein Buch im Garten.",
    "Drei Leute fahren mit Fahrrädern einen Hügel hinunter.",
    "Ein Mann singt auf einer Bühne.",
    "Die Katze schläft auf dem Sofa.",
    "Ein Junge springt ins Wasser.",
    "Zwei Frauen unterhalten sich an einem Tisch.",
]


def _train_sentencepiece(sentences: list[str], vocab_size: int) -> bytes:
    """A small unigram SentencePiece model, returned as the serialized .spm bytes."""
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences * 5),
        model_writer=model,
        vocab_size=vocab_size,
        model_type="unigram",
        character_coverage=1.0,
        # Marian's own vocab.json maps the specials; SentencePiece keeps only <unk> (id 0 as in opus-mt models).
        unk_id=0,
        bos_id=-1,
        eos_id=-1,
        pad_id=-1,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    return model.getvalue()


def _pieces(spm_bytes: bytes) -> list[str]:
    processor = spm.SentencePieceProcessor(model_proto=spm_bytes)
    return [processor.id_to_piece(i) for i in range(processor.get_piece_size())]


def build_tiny_marian(folder: Path) -> Path:
    """Build and save a tiny random MarianMT model + tokenizer into `folder`; return `folder`."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    source_spm = _train_sentencepiece(_ENGLISH, vocab_size=60)
    target_spm = _train_sentencepiece(_GERMAN, vocab_size=60)

    # One shared vocabulary, as in opus-mt checkpoints: eos and unk first, pieces of both languages, pad last.
    vocab = {"</s>": 0, "<unk>": 1}
    for piece in _pieces(source_spm) + _pieces(target_spm):
        vocab.setdefault(piece, len(vocab))
    vocab["<pad>"] = len(vocab)

    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        (scratch / "source.spm").write_bytes(source_spm)
        (scratch / "target.spm").write_bytes(target_spm)
        (scratch / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
        tokenizer = MarianTokenizer(
            source_spm=str(scratch / "source.spm"),
            target_spm=str(scratch / "target.spm"),
            vocab=str(scratch / "vocab.json"),
            source_lang="en",
            target_lang="de",
            model_max_length=64,
        )
        tokenizer.save_pretrained(folder)

    pad_id = vocab["<pad>"]
    config = MarianConfig(
        vocab_size=len(vocab),
        decoder_vocab_size=len(vocab),
        d_model=16,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        max_position_embeddings=64,
        pad_token_id=pad_id,
        eos_token_id=vocab["</s>"],
        decoder_start_token_id=pad_id,
        share_encoder_decoder_embeddings=True,
        # With the usual 0.02 a random model says the same thing whatever the input; wide weights make its
        # (meaningless) translations depend on the source sentence, so mix-ups in batching would show.
        init_std=1.0,
    )
    torch.manual_seed(0)
    model = MarianMTModel(config).eval()
    model.generation_config = GenerationConfig(
        decoder_start_token_id=pad_id,
        pad_token_id=pad_id,
        eos_token_id=vocab["</s>"],
        forced_eos_token_id=vocab["</s>"],
        # A random model favours <unk>, which decodes to nothing; banning it keeps its translations non-empty.
        bad_words_ids=[[pad_id], [vocab["<unk>"]]],
    )
    model.save_pretrained(folder)
    return folder
