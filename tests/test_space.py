"""The Space: front matter and requirements are valid, staging ships what the app needs, the upload lands as staged."""

import ast
import sys
import time
from importlib.metadata import packages_distributions, version
from pathlib import Path

import pytest
from conftest import ROOT
from huggingface_hub import SpaceCard, constants
from loopback_hub import LoopbackHub
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

import deploy_space
from transformer_en_de.hub import PublishError

TOKEN = "hf_loopback_write_token"
SPACE_CODE = ["app.py", "metrics.py", *sorted(str(path.relative_to(ROOT)) for pattern in ("modeling", "tokenizer")
                                              for path in (ROOT / pattern).glob("*.py"))]


def requirements() -> dict[str, Requirement]:
    lines = (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines()
    parsed = [Requirement(line) for line in lines if line.strip() and not line.lstrip().startswith("#")]
    return {canonicalize_name(requirement.name): requirement for requirement in parsed}


def third_party_imports(path: Path) -> set[str]:
    """Top-level modules a file imports, less the standard library and the project's own modules."""
    local = {"app", "metrics", "modeling", "tokenizer"}
    modules = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            modules |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            modules.add(node.module.split(".")[0])
    return {module for module in modules if module not in sys.stdlib_module_names and module not in local}


def folder_files(folder: Path) -> dict[str, bytes]:
    return {path.relative_to(folder).as_posix(): path.read_bytes() for path in folder.rglob("*") if path.is_file()}


def test_every_requirement_parses():
    assert len(requirements()) >= 10  # Requirement() raised on any line that does not parse


def test_requirements_cover_what_the_space_imports():
    distributions = packages_distributions()
    needed = {"sentencepiece"}  # MarianTokenizer imports it inside transformers
    for name in SPACE_CODE:
        for module in third_party_imports(ROOT / name):
            assert module in distributions, f"{name} imports {module}, which no installed package provides"
            needed |= {canonicalize_name(distribution) for distribution in distributions[module]}

    assert needed - set(requirements()) == set()
    assert {"gradio", "matplotlib", "torch", "transformers"} <= needed  # the scan saw app.py's imports


def check_front_matter(data: dict) -> None:
    """What the Hub needs to run the app, and agreement with requirements.txt."""
    assert data["sdk"] == "gradio"
    assert (ROOT / data["app_file"]).is_file()
    assert Version(str(data["sdk_version"])) in requirements()["gradio"].specifier
    assert Version(str(data["sdk_version"])).major == Version(version("gradio")).major
    assert deploy_space.MARIAN_MODEL_ID in data["models"]
    assert data["license"] and data["title"] and data["emoji"]
    assert len(data.get("short_description", "")) <= 60  # the Hub refuses longer ones


def test_staged_readme_front_matter_is_a_valid_space_config():
    card = SpaceCard(deploy_space.space_readme(ROOT / "README.md", model_id="someone/transformer-en-de"))

    check_front_matter(card.data.to_dict())
    assert card.data.models[0] == "someone/transformer-en-de"


def test_readme_front_matter_when_present():
    readme = ROOT / "README.md"
    if not readme.is_file() or not readme.read_text(encoding="utf-8").startswith("---"):
        pytest.skip("README.md has no front matter yet; the staged README (tested above) gets the Space settings")
    check_front_matter(SpaceCard.load(readme).data.to_dict())


@pytest.fixture
def model_with_checkpoint(tiny_model_dir, tmp_path):
    """A saved model folder as train.py leaves it: the model's files plus a checkpoint sub-folder."""
    folder = tmp_path / "trained"
    folder.mkdir()
    for name, data in folder_files(tiny_model_dir).items():
        (folder / name).write_bytes(data)
    (folder / "checkpoint-100").mkdir()
    (folder / "checkpoint-100" / "optimizer.pt").write_bytes(b"\x00" * 16)
    return folder


def test_staging_ships_the_app_its_code_and_the_model(model_with_checkpoint, tmp_path):
    staged = deploy_space.stage_space(tmp_path / "space", model_with_checkpoint)
    files = folder_files(staged)

    for name in ["app.py", "requirements.txt", *SPACE_CODE]:
        assert files[name] == (ROOT / name).read_bytes(), name
    model_files = {f"{deploy_space.MODEL_IN_SPACE}/{name}": data
                   for name, data in folder_files(model_with_checkpoint).items() if "/" not in name}
    assert model_files.items() <= files.items()
    assert not any("checkpoint-100" in name or "__pycache__" in name for name in files)
    check_front_matter(SpaceCard(files["README.md"].decode("utf-8")).data.to_dict())


def test_staging_refuses_a_folder_without_a_model(tmp_path):
    with pytest.raises(PublishError, match=f"No saved model at {tmp_path / 'nothing'}"):
        deploy_space.stage_space(tmp_path / "space", tmp_path / "nothing")


def test_deploy_uploads_exactly_the_staged_files(model_with_checkpoint, tmp_path, monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # the loopback hub is the network here
    with LoopbackHub(token=TOKEN) as hub:
        url = deploy_space.deploy("someone/translation-demo", model_with_checkpoint, token=TOKEN,
                                  endpoint=hub.endpoint, staging=tmp_path / "staged")

        assert url == f"{hub.endpoint}/spaces/someone/translation-demo"
        assert hub.files("someone/translation-demo", repo_type="space") == folder_files(tmp_path / "staged")
        assert hub.repo("someone/translation-demo", repo_type="space").sdk == "gradio"


def test_deploy_offline_fails_fast_and_clearly(model_with_checkpoint, capsys):
    started = time.monotonic()

    code = deploy_space.main(["someone/translation-demo", "--model", str(model_with_checkpoint)])

    assert code == 1 and time.monotonic() - started < 10
    assert "offline mode is on (HF_HUB_OFFLINE=1)" in capsys.readouterr().err
