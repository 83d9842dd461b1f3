"""The tiny MarianMT laid out on the loopback Hub the three ways an OPUS-MT repo can be found on the real one.

- "safetensors": `model.safetensors` on main (as a repo converted by its owners);
- "conversion pull request": only `pytorch_model.bin` on main, `model.safetensors` in the pull request `refs/pr/1`
  opened by SFconvertbot, the Hub's conversion bot, on top of main (as most Helsinki-NLP repos are);
- "pickle": only `pytorch_model.bin` (as a repo nobody converted).

The pickle is what `save_pretrained` wrote before safetensors: `torch.save` of the state dict.
"""

import io
from pathlib import Path

import torch
from loopback_hub import LoopbackHub, folder_files
from transformers import MarianMTModel

MARIAN_ID = "Helsinki-NLP/opus-mt-en-de"
LAYOUTS = ("safetensors", "conversion pull request", "pickle")


def pickle_weights(folder: Path) -> bytes:
    """The folder's model as a pytorch_model.bin."""
    buffer = io.BytesIO()
    torch.save(MarianMTModel.from_pretrained(folder).state_dict(), buffer)
    return buffer.getvalue()


def publish_marian(hub: LoopbackHub, folder: Path, layout: str, repo_id: str = MARIAN_ID) -> str:
    """Put the tiny MarianMT of `folder` on `hub` as `repo_id` in `layout`; returns main's commit."""
    files = folder_files(folder)
    safetensors = files.pop("model.safetensors")
    if layout == "safetensors":
        return hub.add_model(repo_id, {**files, "model.safetensors": safetensors})
    main = hub.add_model(repo_id, {**files, "pytorch_model.bin": pickle_weights(folder)})
    if layout == "conversion pull request":
        hub.open_pull_request(repo_id, {"model.safetensors": safetensors})
    return main
