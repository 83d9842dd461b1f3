"""`loading.load_model` runs a model's own code only from the folder or Hub repo it was asked for: a config whose
`auto_map` points at another repository is refused, naming the reference, and that repository's code never runs.

Each load runs in a fresh Python (as the app and compare.py do) with a Hugging Face cache of its own, in which the
other repository's code is really there to be found: a module that writes a marker file when it is imported.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

EVIL_REFERENCE = "other/code--evil.EvilConfig"
EVIL_MODULE = """
import os
from pathlib import Path

Path(os.environ["MARKER"]).write_text("the code of other/code ran")

from transformers import PretrainedConfig


class EvilConfig(PretrainedConfig):
    model_type = "evil_type"
"""
LOAD = r"""
import json, sys
from transformer_en_de.decoding.loading import load_model

try:
    model, tokenizer = load_model(sys.argv[1])
    print(json.dumps({"loaded": type(model).__name__}))
except RuntimeError as error:
    print(json.dumps({"error": str(error)}))
"""


def cache_repo(cache: Path, repo_id: str, files: dict[str, bytes], commit: str) -> None:
    """`repo_id` at `commit` in the Hugging Face cache layout, as a download leaves it (refs/main names the commit)."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    for name, data in files.items():
        (snapshot / name).write_bytes(data)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)


@pytest.fixture
def hub_cache(tmp_path):
    """A cache holding other/code, the repository no operator listed, with its marker-writing module."""
    cache = tmp_path / "hf-cache"
    cache_repo(cache, "other/code", {"evil.py": EVIL_MODULE.encode()}, "a" * 40)
    return cache


def evil_config() -> bytes:
    auto_map = {"AutoConfig": EVIL_REFERENCE, "AutoModelForSeq2SeqLM": "other/code--evil.EvilModel"}
    return json.dumps({"model_type": "evil_type", "auto_map": auto_map}).encode()


def load_in_fresh_python(model_id: str, cache: Path, marker: Path) -> dict:
    env = dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        HF_HUB_CACHE=str(cache),
        HF_MODULES_CACHE=str(cache.parent / "modules"),
        MARKER=str(marker),
        OMP_NUM_THREADS="1",
    )
    result = subprocess.run(
        [sys.executable, "-c", LOAD, model_id], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_a_listed_folder_whose_config_points_at_another_repo_is_refused(hub_cache, tmp_path):
    listed = tmp_path / "comparison-model"
    listed.mkdir()
    (listed / "config.json").write_bytes(evil_config())
    marker = tmp_path / "marker"

    outcome = load_in_fresh_python(str(listed), hub_cache, marker)

    assert not marker.exists()
    assert EVIL_REFERENCE in outcome["error"] and "another repository (other/code)" in outcome["error"]
    assert "\n" not in outcome["error"]


def test_a_listed_hub_repo_whose_config_points_at_another_repo_is_refused(hub_cache, tmp_path):
    cache_repo(hub_cache, "someone/comparison", {"config.json": evil_config()}, "b" * 40)
    marker = tmp_path / "marker"

    outcome = load_in_fresh_python("someone/comparison", hub_cache, marker)

    assert not marker.exists()
    assert EVIL_REFERENCE in outcome["error"] and "(someone/comparison)" in outcome["error"]


def test_a_hub_repo_with_nothing_foreign_loads_from_the_cache(hub_cache, tiny_model_dir, tmp_path):
    files = {path.name: path.read_bytes() for path in tiny_model_dir.iterdir() if path.is_file()}
    cache_repo(hub_cache, "someone/tiny", files, "c" * 40)
    marker = tmp_path / "marker"

    outcome = load_in_fresh_python("someone/tiny", hub_cache, marker)

    assert outcome == {"loaded": "TransformerMTForConditionalGeneration"}


def test_a_folder_with_its_own_code_still_loads_with_it(tiny_model_dir, tmp_path):
    """Our own layout: auto_map names modules of the folder itself (no `repo--`), so it is trusted."""
    from transformer_en_de.decoding import loading

    folder = tmp_path / "own-code"
    shutil.copytree(tiny_model_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    assert config["auto_map"] and all("--" not in value for value in config["auto_map"].values())
    loading.check_code_origin(folder, str(folder), hub_repo=False)  # nothing refused
    loading.check_code_origin(folder, "someone/tiny", hub_repo=True)


def test_a_model_transformers_knows_loads_with_its_own_code_whatever_its_auto_map_says(hub_cache, tmp_path):
    """No remote code is trusted for a model type transformers knows, so a foreign `auto_map` is never run, and the
    model is not refused for it."""
    from tiny_marian import build_tiny_marian

    marian = build_tiny_marian(tmp_path / "marian")
    config = json.loads((marian / "config.json").read_text())
    (marian / "config.json").write_text(json.dumps(dict(config, auto_map={"AutoConfig": EVIL_REFERENCE})))
    marker = tmp_path / "marker"

    outcome = load_in_fresh_python(str(marian), hub_cache, marker)

    assert outcome == {"loaded": "MarianMTModel"} and not marker.exists()
