"""One joint English+German byte-level BPE tokenizer, trained with the `tokenizers` library and wrapped as a
`transformers` fast tokenizer (`save_pretrained`, `AutoTokenizer.from_pretrained`, `text_target=`)."""

from .bpe import SPECIAL_TOKENS, config_token_fields, forget_call_state, load_tokenizer, train_tokenizer

__all__ = ["SPECIAL_TOKENS", "config_token_fields", "forget_call_state", "load_tokenizer", "train_tokenizer"]
