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
from transformer_en_de.publishing.push import PublishError

TOKEN = "hf_loopback_write_token"
SPACE_CODE = [
    "app.py",
    *sorted(
        str(path.relative_to(ROOT))
        for folder in deploy_space.SPACE_FOLDERS
        for path in (ROOT / folder).rglob("*.py")
        if not {"__pycache__", *deploy_space.TRAINING_ONLY} & set(path.parts)
    ),
]


def requirements(text: str | None = None) -> dict[str, Requirement]:
    """The requirements of a requirements.txt (by default the one deploy_space.py generates from pyproject.toml); pip
    options (`--...`) and comments left out."""
    text = text if text is not None else deploy_space.space_requirements(deploy_space.app_requirements())
    lines = text.splitlines()
    parsed = [Requirement(line) for line in lines if line.strip() and not line.lstrip().startswith(("#", "--"))]
    return {canonicalize_name(requirement.name): requirement for requirement in parsed}


def import_time_nodes(tree: ast.AST):
    """Every node that runs when the module is imported: function bodies (where optional imports live) skipped."""
    for node in ast.iter_child_nodes(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            yield node
            yield from import_time_nodes(node)


def third_party_imports(path: Path) -> set[str]:
    """Top-level modules a file imports when it is imported, less the standard library and the project's own."""
    local = {"app", "modeling", "tokenizer", "transformer_en_de"}
    modules = set()
    for node in import_time_nodes(ast.parse(path.read_text(encoding="utf-8"))):
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
    # The arena's sign-in: the Hub sets up OAuth for the Space, and Gradio's OAuth routes have what they import.
    assert data["hf_oauth"] is True and "hf_oauth_scopes" not in data  # the default scopes: openid profile
    assert {"authlib", "itsdangerous"} <= set(requirements())


def test_staged_readme_front_matter_is_a_valid_space_config():
    card = SpaceCard(deploy_space.space_readme(model_id="someone/transformer-en-de"))

    check_front_matter(card.data.to_dict())
    assert card.data.models[0] == "someone/transformer-en-de"


def test_space_card_is_the_template_for_visitors_not_the_projects_readme():
    card = SpaceCard(deploy_space.space_readme(weights_license="cc-by-nc-4.0"))
    template_body = deploy_space.SPACE_CARD_TEMPLATE.read_text(encoding="utf-8").split("---", 2)[2]
    first_line = template_body.strip().splitlines()[0]
    assert card.text.strip().startswith(first_line)
    assert "{{" not in card.text  # every placeholder filled
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert not readme.startswith("---")  # the project's README is no Space card
    assert first_line not in readme


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

    for name in SPACE_CODE:
        assert files[name] == (ROOT / name).read_bytes(), name
    assert {"transformer_en_de/decoding/engine.py", "modeling/modeling_transformer_mt.py"} <= set(files)  # app.py
    assert not [name for name in files if name.startswith("transformer_en_de/training/")]  # training stays home
    model_files = {
        f"{deploy_space.MODEL_IN_SPACE}/{name}": data
        for name, data in folder_files(model_with_checkpoint).items()
        if "/" not in name
    }
    assert model_files.items() <= files.items()
    assert not any("checkpoint-100" in name or "__pycache__" in name for name in files)
    check_front_matter(SpaceCard(files["README.md"].decode("utf-8")).data.to_dict())


def test_staging_refuses_a_folder_without_a_model(tmp_path):
    with pytest.raises(PublishError, match=f"No saved model at {tmp_path / 'nothing'}"):
        deploy_space.stage_space(tmp_path / "space", tmp_path / "nothing")


def test_deploy_uploads_exactly_the_staged_files(model_with_checkpoint, tmp_path, monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # the loopback hub is the network here
    with LoopbackHub(token=TOKEN) as hub:
        url = deploy_space.deploy(
            "someone/translation-demo",
            model_with_checkpoint,
            token=TOKEN,
            endpoint=hub.endpoint,
            staging=tmp_path / "staged",
            scores=False,
        )

        assert url == f"{hub.endpoint}/spaces/someone/translation-demo"
        assert hub.files("someone/translation-demo", repo_type="space") == folder_files(tmp_path / "staged")
        assert hub.repo("someone/translation-demo", repo_type="space").sdk == "gradio"


def test_deploy_offline_fails_fast_and_clearly(model_with_checkpoint, capsys):
    started = time.monotonic()

    code = deploy_space.main(["someone/translation-demo", "--model", str(model_with_checkpoint)])

    assert code == 1 and time.monotonic() - started < 10
    assert "offline mode is on (HF_HUB_OFFLINE=1)" in capsys.readouterr().err


def test_space_requirements_pull_the_cpu_build_of_torch(model_with_checkpoint, tmp_path):
    staged = deploy_space.stage_space(tmp_path / "space", model_with_checkpoint)
    text = (staged / "requirements.txt").read_text(encoding="utf-8")
    options = [line.strip() for line in text.splitlines() if line.strip().startswith("--")]

    assert options == ["--extra-index-url https://download.pytorch.org/whl/cpu"]
    assert requirements(text) == requirements()
    # Only the CPU index has a +cpu build: PyPI's torch (the CUDA build) cannot satisfy the pin, whatever its version.
    assert str(requirements(text)["torch"].specifier) == f"=={Version(version('torch')).public}+cpu"


def test_the_space_installs_the_versions_the_tests_run_with():
    pinned = {name: str(requirement.specifier) for name, requirement in requirements().items()}

    for name, specifier in pinned.items():
        installed = Version(version(name))
        assert specifier in (f"=={installed}", f"=={installed.public}+cpu"), name
    for text in deploy_space.app_requirements():  # every requirement of the app, and what it needs, is pinned
        assert canonicalize_name(Requirement(text).name) in pinned, text
    assert {"filelock", "sympy", "safehttpx", "httpx"} <= set(pinned)  # what they need in turn (torch's, gradio's)
    assert deploy_space.read_lock() == deploy_space.read_lock_text(
        deploy_space.lock_text(deploy_space.app_requirements())
    )  # the lock is this environment: `make lock` takes newer releases


def test_a_lock_that_does_not_fit_pyproject_or_pins_cuda_torch_is_refused():
    lock = deploy_space.read_lock()

    with pytest.raises(PublishError, match="pins transformers to 4.57.0, but pyproject.toml asks for"):
        deploy_space.space_requirements(deploy_space.app_requirements(), dict(lock, transformers="4.57.0"))
    with pytest.raises(PublishError, match="not its CPU build"):
        deploy_space.space_requirements(deploy_space.app_requirements(), dict(lock, torch="2.13.0"))


def test_staging_offline_ships_the_comparison_as_it_is_and_says_why(model_with_checkpoint, tmp_path):
    said = []
    staged = deploy_space.stage_space(tmp_path / "space", model_with_checkpoint, report=said.append)

    assert (staged / deploy_space.COMPARISON_FILE).read_bytes() == (ROOT / deploy_space.COMPARISON_FILE).read_bytes()
    assert said == [
        "[deploy] the Hugging Face Hub is unreachable: the Space ships the comparison as it is, so its "
        "Corpus tab has no scores for Helsinki-NLP/opus-mt-en-de."
    ]


def test_space_license_is_the_shipped_weights_licence(tmp_path):
    shipped = deploy_space.model_license(deploy_space.DEFAULT_MODEL_FOLDER)
    assert shipped == "cc-by-nc-4.0"  # Multi30k's non-commercial terms, as the shipped model card declares

    card = SpaceCard(deploy_space.space_readme(weights_license=shipped))
    assert card.data.license == shipped
    assert "Apache-2.0" in card.text and shipped in card.text  # the card says which licence covers what
    assert deploy_space.model_license(tmp_path) is None  # no model card: the code's licence stays


def test_staged_space_carries_the_model_cards_licence(model_with_checkpoint, tmp_path):
    (model_with_checkpoint / "README.md").write_text("---\nlicense: cc-by-nc-4.0\n---\n\n# tiny\n", encoding="utf-8")
    staged = deploy_space.stage_space(tmp_path / "space", model_with_checkpoint)

    data = SpaceCard.load(staged / "README.md").data.to_dict()
    check_front_matter(data)
    assert data["license"] == "cc-by-nc-4.0"


def test_staging_refuses_a_model_that_does_not_load(model_with_checkpoint, tmp_path, capsys):
    weights = model_with_checkpoint / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])

    with pytest.raises(PublishError, match="does not load"):
        deploy_space.stage_space(tmp_path / "space", model_with_checkpoint)
    assert not (tmp_path / "space").exists()
    assert deploy_space.main(["--stage-only", str(tmp_path / "space"), "--model", str(model_with_checkpoint)]) == 1
    assert "does not load" in capsys.readouterr().err
