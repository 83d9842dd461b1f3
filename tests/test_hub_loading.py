"""How `hub` loads weights: safetensors (a pickle is refused with the command that converts it, unless the operator
listed the model), `id@revision` pins a Hub revision, remote code is trusted only where a config needs it; and, online
against the loopback Hub laid out as real OPUS-MT repos are, MarianMT loads at one commit in each layout."""

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch
from conftest import ROOT
from hub_layouts import LAYOUTS, MARIAN_ID, pickle_weights, publish_marian
from loopback_hub import LoopbackHub
from tiny_marian import build_tiny_marian

from transformer_en_de.decoding import loading
from transformer_en_de.publishing import push


def pickle_only(folder, tmp_path):
    """A copy of `folder` whose weights are a pytorch_model.bin (a pickle) instead of model.safetensors."""
    copy = tmp_path / "pickled"
    shutil.copytree(folder, copy)
    model, _ = loading.load_model(str(folder))
    torch.save(model.state_dict(), copy / "pytorch_model.bin")
    (copy / "model.safetensors").unlink()
    return copy


def test_a_folder_with_pickle_weights_only_is_refused_with_the_conversion(tiny_model_dir, tmp_path):
    folder = pickle_only(tiny_model_dir, tmp_path)

    for load in (loading.load_model, loading.model_folder):
        with pytest.raises(RuntimeError, match="loads safetensors only") as refusal:
            load(str(folder))
        assert f"from_pretrained('{folder}', use_safetensors=False).save_pretrained('{folder}')" in str(refusal.value)
    with pytest.raises(push.PublishError, match="safetensors only"):
        push.check_model_loads(folder)


def test_the_conversion_the_message_gives_makes_a_folder_that_loads(tiny_model_dir, tmp_path):
    from transformers import AutoModelForSeq2SeqLM

    folder = pickle_only(tiny_model_dir, tmp_path)
    AutoModelForSeq2SeqLM.from_pretrained(folder, use_safetensors=False, trust_remote_code=True).save_pretrained(folder)
    (folder / "pytorch_model.bin").unlink()

    model, _ = loading.load_model(str(folder))
    assert model.num_parameters() > 0


def test_remote_code_only_where_the_config_needs_it(tiny_model_dir, tmp_path):
    marian = build_tiny_marian(tmp_path / "marian")
    elsewhere = tmp_path / "custom"
    elsewhere.mkdir()
    config = json.loads((tiny_model_dir / "config.json").read_text())
    (elsewhere / "config.json").write_text(json.dumps(dict(config, model_type="a_type_transformers_lacks")))

    assert "auto_map" in config and loading.needs_remote_code(str(elsewhere), local_files_only=True)
    # Ours, with the project imported (it registers the model type): transformers loads it with no remote code.
    assert not loading.needs_remote_code(str(tiny_model_dir), local_files_only=True)
    assert not loading.needs_remote_code(str(marian), local_files_only=True)  # transformers' own Marian


def test_a_hub_id_may_pin_a_revision(tmp_path):
    assert loading.split_revision("Helsinki-NLP/opus-mt-en-de@a1b2c3d") == ("Helsinki-NLP/opus-mt-en-de", "a1b2c3d")
    assert loading.split_revision("Helsinki-NLP/opus-mt-en-de") == ("Helsinki-NLP/opus-mt-en-de", None)
    odd = tmp_path / "folder@v1"
    odd.mkdir()
    assert loading.split_revision(str(odd)) == (str(odd), None)  # a folder is a folder, "@" or not
    with pytest.raises(RuntimeError, match="not an id@revision"):
        loading.split_revision("Helsinki-NLP/opus-mt-en-de@")


def test_a_pinned_id_offline_says_why_in_plain_words():
    with pytest.raises(RuntimeError, match="the Hugging Face Hub is unreachable") as refusal:
        loading.load_model("Helsinki-NLP/opus-mt-en-de@0123abc")
    assert "opus-mt-en-de@0123abc" in str(refusal.value)


# ---------------------------------------------------------------------------------------- from a Hub laid out as real

LOAD = """
import json, sys
from transformer_en_de.decoding.loading import load_listed_model
try:
    loaded = load_listed_model(sys.argv[1], allow_pickle=sys.argv[2] == "allow")
    ids = loaded.tokenizer(["A dog runs in the park."], return_tensors="pt")
    out = loaded.model.generate(**ids, num_beams=1, do_sample=False, max_new_tokens=8)
    print(json.dumps({"revision": loaded.revision, "weights": loaded.weights, "ids": out[0].tolist()}))
except RuntimeError as error:
    print(json.dumps({"error": str(error)}))
"""


def load_online(hub, model_id: str, tmp_path, allow_pickle: bool = True) -> dict:
    """`load_listed_model` in a process of its own, online, with the loopback Hub as its endpoint (huggingface_hub
    reads HF_ENDPOINT and HF_HUB_OFFLINE when it is imported) and an empty cache."""
    env = dict(os.environ, HF_HUB_OFFLINE="0", HF_ENDPOINT=hub.endpoint, HF_HOME=str(tmp_path / "hf-home"))
    done = subprocess.run(
        [sys.executable, "-c", LOAD, model_id, "allow" if allow_pickle else "refuse"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def marian_dir(tmp_path_factory):
    return build_tiny_marian(tmp_path_factory.mktemp("marian"))


@pytest.fixture(scope="module")
def marian_ids(marian_dir):
    """What the tiny MarianMT generates for the test sentence, loaded from its folder here."""
    model, tokenizer = loading.load_model(str(marian_dir))
    ids = tokenizer(["A dog runs in the park."], return_tensors="pt")
    return model.generate(**ids, num_beams=1, do_sample=False, max_new_tokens=8)[0].tolist()


@pytest.mark.slow
@pytest.mark.parametrize("layout", LAYOUTS)
def test_marian_loads_from_the_hub_in_each_layout_at_one_commit(layout, marian_dir, marian_ids, tmp_path):
    with LoopbackHub() as loopback:
        main = publish_marian(loopback, marian_dir, layout)
        loaded = load_online(loopback, MARIAN_ID, tmp_path)
        requests = list(loopback.requests)
        pull_request = loopback.repo(MARIAN_ID).refs.get("refs/pr/1")

    assert loaded["ids"] == marian_ids  # the same weights, whichever file they came from
    weights_read = [
        path.rsplit("/", 1)[1]
        for method, path in requests
        if method == "GET" and path.endswith((".safetensors", ".bin"))
    ]
    if layout == "safetensors":
        assert loaded == dict(loaded, revision=main, weights="") and weights_read == ["model.safetensors"]
    elif layout == "conversion pull request":
        assert loaded["revision"] == pull_request != main
        assert "conversion pull request refs/pr/1" in loaded["weights"] and pull_request[:7] in loaded["weights"]
        assert weights_read == ["model.safetensors"]  # the pickle on main is never read
        assert ("GET", f"/api/models/{MARIAN_ID}/commits/refs%2Fpr%2F1") in requests  # its parent was checked
    else:
        assert loaded["revision"] == main and "pickle weights only" in loaded["weights"]
        assert "weights_only unpickler" in loaded["weights"] and weights_read == ["pytorch_model.bin"]


@pytest.mark.slow
def test_a_pull_request_by_anyone_but_the_conversion_bot_or_from_another_commit_is_not_used(marian_dir, tmp_path):
    with LoopbackHub() as loopback:
        main = publish_marian(loopback, marian_dir, "pickle")
        safetensors = (marian_dir / "model.safetensors").read_bytes()
        loopback.open_pull_request(MARIAN_ID, {"model.safetensors": safetensors}, author="someone-else")
        loopback.add_model(MARIAN_ID, {**loopback.repo(MARIAN_ID).files, "README.md": b"# moved on\n"})
        loopback.open_pull_request(MARIAN_ID, {"model.safetensors": safetensors})  # the bot's, on the new main
        stale = loopback.repo(MARIAN_ID).refs["main"]
        loopback.add_model(MARIAN_ID, {**loopback.repo(MARIAN_ID).files, "README.md": b"# and again\n"})
        loaded = load_online(loopback, MARIAN_ID, tmp_path)

    assert main != stale != loaded["revision"] == loopback.repo(MARIAN_ID).refs["main"]
    assert "pickle weights only" in loaded["weights"]  # neither pull request converted the commit loaded


@pytest.mark.slow
def test_failures_on_the_hub_are_said_in_our_words(marian_dir, tmp_path):
    with LoopbackHub() as loopback:
        publish_marian(loopback, marian_dir, "pickle")
        refused = load_online(loopback, MARIAN_ID, tmp_path, allow_pickle=False)["error"]
        missing = load_online(loopback, "Helsinki-NLP/opus-mt-en-xx", tmp_path)["error"]
        no_revision = load_online(loopback, f"{MARIAN_ID}@v9", tmp_path)["error"]

    assert "has only PyTorch pickle weights" in refused and "Convert it once" in refused
    assert (
        missing == "could not be loaded: there is no model Helsinki-NLP/opus-mt-en-xx on the Hugging Face Hub "
        "(or it is private)."
    )
    assert no_revision == f"could not be loaded: {MARIAN_ID} has no revision 'v9' on the Hugging Face Hub."
    for message in (refused, missing, no_revision):
        assert "use_safetensors=True" not in message and "Please" not in message


def test_a_listed_folder_with_pickle_weights_loads_them_and_says_so(tmp_path, marian_dir):
    folder = tmp_path / "pickled-marian"
    shutil.copytree(marian_dir, folder)
    (folder / "pytorch_model.bin").write_bytes(pickle_weights(marian_dir))
    (folder / "model.safetensors").unlink()

    loaded = loading.load_listed_model(str(folder), allow_pickle=True)
    reference, _ = loading.load_model(str(marian_dir))

    assert "weights_only unpickler" in loaded.weights and loaded.revision is None
    for (name, ours), theirs in zip(loaded.model.state_dict().items(), reference.state_dict().values(), strict=True):
        assert torch.equal(ours, theirs), name
    with pytest.raises(RuntimeError, match="loads safetensors only"):
        loading.load_listed_model(str(folder))  # not listed as allowed: refused with the conversion
