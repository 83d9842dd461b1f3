"""The flags that say what decodes, declared once for every command that decodes (app.py, compare.py,
translate_corpus.py)."""

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
