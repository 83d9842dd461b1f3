"""How `hub` loads weights: safetensors only (a pickle is refused with the command that converts it), `id@revision`
pins a Hub revision, and remote code is trusted only where a config needs it."""

import json
import shutil

import pytest
import torch
from tiny_marian import build_tiny_marian

from transformer_en_de import hub


def pickle_only(folder, tmp_path):
    """A copy of `folder` whose weights are a pytorch_model.bin (a pickle) instead of model.safetensors."""
    copy = tmp_path / "pickled"
    shutil.copytree(folder, copy)
    model, _ = hub.load_model(str(folder))
    torch.save(model.state_dict(), copy / "pytorch_model.bin")
    (copy / "model.safetensors").unlink()
    return copy


def test_a_folder_with_pickle_weights_only_is_refused_with_the_conversion(tiny_model_dir, tmp_path):
    folder = pickle_only(tiny_model_dir, tmp_path)

    for load in (hub.load_model, hub.model_folder):
        with pytest.raises(RuntimeError, match="loads safetensors only") as refusal:
            load(str(folder))
        assert f"from_pretrained('{folder}', use_safetensors=False).save_pretrained('{folder}')" in str(refusal.value)
    with pytest.raises(hub.PublishError, match="safetensors only"):
        hub.check_model_loads(folder)


def test_the_conversion_the_message_gives_makes_a_folder_that_loads(tiny_model_dir, tmp_path):
    from transformers import AutoModelForSeq2SeqLM

    folder = pickle_only(tiny_model_dir, tmp_path)
    AutoModelForSeq2SeqLM.from_pretrained(folder, use_safetensors=False, trust_remote_code=True).save_pretrained(folder)
    (folder / "pytorch_model.bin").unlink()

    model, _ = hub.load_model(str(folder))
    assert model.num_parameters() > 0


def test_remote_code_only_where_the_config_needs_it(tiny_model_dir, tmp_path):
    marian = build_tiny_marian(tmp_path / "marian")
    elsewhere = tmp_path / "custom"
    elsewhere.mkdir()
    config = json.loads((tiny_model_dir / "config.json").read_text())
    (elsewhere / "config.json").write_text(json.dumps(dict(config, model_type="a_type_transformers_lacks")))

    assert "auto_map" in config and hub.needs_remote_code(str(elsewhere), local_files_only=True)
    # Ours, with the project imported (it registers the model type): transformers loads it with no remote code.
    assert not hub.needs_remote_code(str(tiny_model_dir), local_files_only=True)
    assert not hub.needs_remote_code(str(marian), local_files_only=True)  # transformers' own Marian


def test_a_hub_id_may_pin_a_revision(tmp_path):
    assert hub.split_revision("Helsinki-NLP/opus-mt-en-de@a1b2c3d") == ("Helsinki-NLP/opus-mt-en-de", "a1b2c3d")
    assert hub.split_revision("Helsinki-NLP/opus-mt-en-de") == ("Helsinki-NLP/opus-mt-en-de", None)
    odd = tmp_path / "folder@v1"
    odd.mkdir()
    assert hub.split_revision(str(odd)) == (str(odd), None)  # a folder is a folder, "@" or not
    with pytest.raises(RuntimeError, match="not an id@revision"):
        hub.split_revision("Helsinki-NLP/opus-mt-en-de@")


def test_a_pinned_id_offline_says_why_in_plain_words():
    with pytest.raises(RuntimeError, match="the Hugging Face Hub is unreachable") as refusal:
        hub.load_model("Helsinki-NLP/opus-mt-en-de@0123abc")
    assert "opus-mt-en-de@0123abc" in str(refusal.value)
