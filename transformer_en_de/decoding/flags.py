"""The flags that say what decodes and how long a sentence may grow, declared once for every command that decodes
(app.py, compare.py, translate_corpus.py)."""

import torch


def add_backend_flags(parser, *, default_backend: str = "torch", device: bool = True) -> None:
    """--backend and --int8, and --device where the command lets PyTorch decode on a GPU."""
    if device:
        parser.add_argument(
            "--device",
            default="cuda" if torch.cuda.is_available() else "cpu",
            help="where PyTorch decodes (default: cuda where there is a GPU)",
        )
    parser.add_argument(
        "--backend",
        choices=["torch", "ctranslate2", "auto"],
        default=default_backend,
        help=f"what decodes: the PyTorch model, or CTranslate2 (converted once and cached beside the model; auto: "
        f"CTranslate2 where it is installed; default {default_backend})",
    )
    parser.add_argument(
        "--int8",
        action="store_true",
        help="int8 weights (CPU only): PyTorch's dynamic int8 linear layers (about 1.4x faster for our model, BLEU "
        "within 0.3), or CTranslate2's int8 with --backend ctranslate2",
    )


def add_length_bound_flags(parser, *, ratio=None, offset=None, whose: str = "") -> None:
    """--max_new_tokens and the per-sentence bound (--max_new_tokens_ratio, --max_new_tokens_offset); `ratio` and
    `offset` their defaults (None: the model's saved ones), `whose` what the bound applies to, in words."""
    shown = " (default: %(default)s)"
    parser.add_argument(
        "--max_new_tokens", "--max-new-tokens", type=int, default=None, help="a hard cap besides the bound per sentence"
    )
    parser.add_argument(
        "--max_new_tokens_ratio",
        "--max-new-tokens-ratio",
        type=float,
        default=ratio,
        metavar="RATIO",
        help=f"each sentence gets at most RATIO * (its source tokens) + OFFSET new tokens{whose}"
        + (shown if ratio is not None else ""),
    )
    parser.add_argument(
        "--max_new_tokens_offset",
        "--max-new-tokens-offset",
        type=int,
        default=offset,
        metavar="OFFSET",
        help="the OFFSET of that bound" + (shown if offset is not None else ""),
    )
