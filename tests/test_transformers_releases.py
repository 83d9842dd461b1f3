"""The shipped folder on the oldest transformers release the project declares, in a virtual environment of its own:
it loads with `trust_remote_code=True` and gives the translations it gives on the installed release (beam search,
greedy, static cache, one sentence at a time) and the same training loss (tests/hub_path_report.py).

The environment (torch as installed here, transformers at `OLDEST_TRANSFORMERS`) is built with pip once and kept in
the user cache. Without a package registry it cannot be built: the test is skipped, unless
TRANSFORMERS_RELEASES_REQUIRED=1 (CI, .ci/run) makes that a failure.
"""

import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest
import torch
import transformers
from conftest import ROOT

sys.path.insert(0, str(ROOT / "modeling"))
from configuration_transformer_mt import OLDEST_TRANSFORMERS  # noqa: E402

sys.path.remove(str(ROOT / "modeling"))

REPORT = ROOT / "tests" / "hub_path_report.py"


def release_environment(version: str) -> Path:
    """The Python of a virtual environment with this torch and transformers `version`, built once."""
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "transformer-en-de" / "transformers-venvs"
    torch_version = torch.__version__.split("+")[0]
    folder = cache / f"transformers-{version}-torch-{torch_version}"
    python = folder / "bin" / "python"
    if not (folder / "ready").is_file():
        shutil.rmtree(folder, ignore_errors=True)
        venv.create(folder, with_pip=True)
        command = [str(python), "-m", "pip", "install", "--quiet", f"torch=={torch_version}"]
        command.append(f"transformers=={version}")
        done = subprocess.run(command, capture_output=True, text=True, timeout=900)
        if done.returncode:
            message = f"`{' '.join(command)}` failed: {(done.stderr or done.stdout).strip()[-500:]}"
            if os.environ.get("TRANSFORMERS_RELEASES_REQUIRED") == "1":
                pytest.fail(message)
            pytest.skip(message)
        (folder / "ready").write_text("")
    return python


def hub_path_report(python: Path, folder: Path, tmp_path: Path) -> dict:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update(
        HF_HUB_OFFLINE="1",
        HF_MODULES_CACHE=str(tmp_path / f"modules-{python.parent.parent.name}"),
        TOKENIZERS_PARALLELISM="false",
    )
    result = subprocess.run(
        [str(python), str(REPORT), str(folder)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_the_shipped_folder_translates_the_same_on_the_oldest_declared_release(tmp_path):
    folder = tmp_path / "transformer-en-de"
    shutil.copytree(ROOT / "models" / "transformer-en-de", folder)
    oldest = hub_path_report(release_environment(OLDEST_TRANSFORMERS), folder, tmp_path)
    installed = hub_path_report(Path(sys.executable), folder, tmp_path)

    assert oldest.pop("transformers") == OLDEST_TRANSFORMERS
    assert installed.pop("transformers") == transformers.__version__
    assert oldest == installed
    assert len({tuple(row) for row in installed["beam"]}) == len(installed["beam"])  # a real comparison
    assert installed["training_gradient_finite"]


def test_the_declared_range_is_the_one_the_code_checks():
    """pyproject's transformers requirement starts at the release the folder's code accepts and CI runs."""
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'"transformers>={OLDEST_TRANSFORMERS},<6"' in pyproject
    for card in (ROOT / "README.md", ROOT / "models" / "transformer-en-de" / "README.md"):
        assert f"transformers>={OLDEST_TRANSFORMERS},<6" in card.read_text(), card
