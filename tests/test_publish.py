"""publish.push_folder against a loopback Hub: what lands is exactly the folder; failures are fast and clear."""

import socket
import time
from pathlib import Path

import pytest
from huggingface_hub import constants
from loopback_hub import LoopbackHub

import publish
from transformer_en_de.hub import PublishError, push_folder

TOKEN = "hf_loopback_write_token"


def folder_files(folder: Path) -> dict[str, bytes]:
    return {path.relative_to(folder).as_posix(): path.read_bytes() for path in folder.rglob("*") if path.is_file()}


@pytest.fixture
def online(monkeypatch):
    """The tests run with HF_HUB_OFFLINE=1; a push to the loopback server needs huggingface_hub's online mode."""
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)


@pytest.fixture
def hub(online):
    with LoopbackHub(token=TOKEN) as server:
        yield server


@pytest.fixture
def space_dir(tmp_path):
    folder = tmp_path / "space"
    folder.mkdir()
    (folder / "app.py").write_text("import gradio as gr\n\ngr.Interface(lambda text: text, 'text', 'text').launch()\n")
    (folder / "requirements.txt").write_text("transformers>=5\nsentencepiece\n")
    (folder / "README.md").write_text("---\ntitle: Demo\nsdk: gradio\napp_file: app.py\n---\n\nA demo Space.\n")
    return folder


def test_model_folder_lands_byte_for_byte(hub, tiny_model_dir):
    url = push_folder(tiny_model_dir, "someone/tiny-transformer", token=TOKEN, endpoint=hub.endpoint)

    assert url == f"{hub.endpoint}/someone/tiny-transformer"
    assert hub.files("someone/tiny-transformer") == folder_files(tiny_model_dir)
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(hub.files("someone/tiny-transformer"))


def test_space_folder_lands_with_its_sdk(hub, space_dir):
    url = push_folder(space_dir, "someone/demo", repo_type="space", token=TOKEN, endpoint=hub.endpoint)

    assert url == f"{hub.endpoint}/spaces/someone/demo"
    assert hub.files("someone/demo", repo_type="space") == folder_files(space_dir)
    assert hub.repo("someone/demo", repo_type="space").sdk == "gradio"  # read from README.md
    with pytest.raises(KeyError):
        hub.files("someone/demo", repo_type="model")


def test_second_push_updates_the_existing_repo(hub, space_dir):
    push_folder(space_dir, "someone/demo", repo_type="space", space_sdk="gradio", token=TOKEN, endpoint=hub.endpoint)
    (space_dir / "app.py").write_text("print('second version')\n")
    push_folder(space_dir, "someone/demo", repo_type="space", space_sdk="gradio", token=TOKEN, endpoint=hub.endpoint)

    assert hub.files("someone/demo", repo_type="space")["app.py"] == b"print('second version')\n"
    assert len(hub.repo("someone/demo", repo_type="space").commits) == 2


def test_private_flag_and_ignored_files(hub, tiny_model_dir, tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    for name, data in folder_files(tiny_model_dir).items():
        (folder / name).write_bytes(data)
    (folder / "__pycache__").mkdir()
    (folder / "__pycache__" / "modeling.cpython-311.pyc").write_bytes(b"\x00")
    (folder / "checkpoint-500").mkdir()
    (folder / "checkpoint-500" / "optimizer.pt").write_bytes(b"\x01")

    push_folder(
        folder, "someone/private", token=TOKEN, endpoint=hub.endpoint, private=True, ignore_patterns=["checkpoint-*"]
    )

    assert hub.files("someone/private") == folder_files(tiny_model_dir)
    assert hub.repo("someone/private").private


def test_wrong_token_is_a_clear_error(hub, tiny_model_dir):
    started = time.perf_counter()
    with pytest.raises(PublishError, match="not authorised") as error:
        push_folder(tiny_model_dir, "someone/tiny", token="hf_wrong", endpoint=hub.endpoint)
    assert time.perf_counter() - started < 10
    assert "hf auth login" in str(error.value) and "someone/tiny" in str(error.value)
    assert hub.repos == {}


def test_offline_mode_fails_fast_and_says_so(monkeypatch, tiny_model_dir):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # HF_HUB_OFFLINE=1, as conftest sets before imports
    started = time.perf_counter()
    with pytest.raises(PublishError, match="HF_HUB_OFFLINE") as error:
        push_folder(tiny_model_dir, "someone/tiny")
    assert time.perf_counter() - started < 10
    assert "someone/tiny" in str(error.value)


def test_endpoint_with_nothing_listening_fails_fast(online, tiny_model_dir):
    with socket.socket() as probe:  # a port that was free a moment ago, now closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.perf_counter()
    with pytest.raises(PublishError, match="unreachable") as error:
        push_folder(tiny_model_dir, "someone/tiny", token=TOKEN, endpoint=f"http://127.0.0.1:{port}")
    assert time.perf_counter() - started < 10
    assert "Check the network" in str(error.value)


def test_missing_folder_is_a_clear_error(tmp_path):
    with pytest.raises(PublishError, match="does not exist"):
        push_folder(tmp_path / "no-such-model", "someone/tiny")


def test_model_folder_needs_config_json(tmp_path):
    (tmp_path / "weights.bin").write_bytes(b"\x00")
    with pytest.raises(PublishError, match="no config.json"):
        push_folder(tmp_path, "someone/tiny")


def test_space_folder_needs_app_py(tmp_path):
    (tmp_path / "README.md").write_text("A Space without its app.\n")
    with pytest.raises(PublishError, match="no app.py"):
        push_folder(tmp_path, "someone/demo", repo_type="space")


def test_command_line_pushes_and_reports(hub, tiny_model_dir, capsys):
    assert publish.main([str(tiny_model_dir), "someone/cli", "--endpoint", hub.endpoint, "--token", TOKEN]) == 0
    assert capsys.readouterr().out.strip() == f"{hub.endpoint}/someone/cli"
    assert hub.files("someone/cli") == folder_files(tiny_model_dir)

    assert publish.main([str(tiny_model_dir / "missing"), "someone/cli"]) == 1
    assert "does not exist" in capsys.readouterr().err
