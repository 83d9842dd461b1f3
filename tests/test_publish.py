"""publish.push_folder against a loopback Hub: what lands is exactly the folder; a model folder that does not load
is refused before any request; failures are fast and clear."""

import copy
import json
import socket
import time
from pathlib import Path

import pytest
import torch
from conftest import HUB_TOKEN
from huggingface_hub import constants, get_session
from loopback_hub import LoopbackHub
from transformers import AutoConfig

import publish
from transformer_en_de.evaluation import write_eval_results
from transformer_en_de.publishing import push as push_module
from transformer_en_de.publishing.model_card import write_model_card
from transformer_en_de.publishing.push import PublishError, push_folder

TOKEN = HUB_TOKEN


def folder_files(folder: Path) -> dict[str, bytes]:
    return {path.relative_to(folder).as_posix(): path.read_bytes() for path in folder.rglob("*") if path.is_file()}


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
    printed = capsys.readouterr().out.strip().splitlines()
    assert printed[-1] == f"{hub.endpoint}/someone/cli"
    assert printed[0] == f"[push] creating (or finding) the model repo 'someone/cli' on {hub.endpoint}"
    assert printed[1].startswith(f"[push] uploading {tiny_model_dir.name} ({len(folder_files(tiny_model_dir))} files")
    assert len(printed) == 3
    assert hub.files("someone/cli") == folder_files(tiny_model_dir)

    assert publish.main([str(tiny_model_dir / "missing"), "someone/cli"]) == 1
    assert "does not exist" in capsys.readouterr().err


def copy_model(source: Path, destination: Path) -> Path:
    destination.mkdir(parents=True)
    for name, data in folder_files(source).items():
        (destination / name).write_bytes(data)
    return destination


def edit_config(folder: Path, **changes) -> None:
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")


def test_truncated_weights_are_refused_before_any_request(hub, tiny_model_dir, tmp_path, capsys):
    folder = copy_model(tiny_model_dir, tmp_path / "broken")
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # an interrupted copy or download

    with pytest.raises(PublishError, match="does not load") as error:
        push_folder(folder, "someone/broken", token=TOKEN, endpoint=hub.endpoint)
    assert "nothing was uploaded" in str(error.value) and "SafetensorError" in str(error.value)
    assert hub.requests == [] and hub.repos == {}

    assert publish.main([str(folder), "someone/broken", "--endpoint", hub.endpoint, "--token", TOKEN]) == 1
    assert "does not load" in capsys.readouterr().err
    assert hub.requests == []


def test_weights_that_do_not_fit_the_config_are_refused(hub, tiny_model_dir, tmp_path):
    deeper = copy_model(tiny_model_dir, tmp_path / "deeper")
    edit_config(deeper, encoder_layers=3)  # transformers would load it with a random third layer, and only warn
    with pytest.raises(PublishError, match="do not fit its config.json: .* missing keys"):
        push_folder(deeper, "someone/deeper", token=TOKEN, endpoint=hub.endpoint)

    wider = copy_model(tiny_model_dir, tmp_path / "wider")
    edit_config(wider, d_ff=128)
    with pytest.raises(PublishError, match="does not load"):
        push_folder(wider, "someone/wider", token=TOKEN, endpoint=hub.endpoint)
    assert hub.requests == []


def test_non_finite_weights_and_a_missing_tokenizer_are_refused(hub, tiny_model, tiny_model_dir, tmp_path):
    nan = tmp_path / "nan"
    broken = copy.deepcopy(tiny_model)
    with torch.no_grad():
        broken.model.encoder.layers[0].feed_forward.fc1.weight[0, 0] = float("nan")
    broken.save_pretrained(nan)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (nan / name).write_bytes((tiny_model_dir / name).read_bytes())
    with pytest.raises(PublishError, match="1 weight tensors hold NaN or infinity"):
        push_folder(nan, "someone/nan", token=TOKEN, endpoint=hub.endpoint)

    no_tokenizer = copy_model(tiny_model_dir, tmp_path / "no-tokenizer")
    (no_tokenizer / "tokenizer.json").unlink()
    (no_tokenizer / "tokenizer_config.json").unlink()
    with pytest.raises(PublishError, match="Loading the tokenizer failed"):
        push_folder(no_tokenizer, "someone/no-tokenizer", token=TOKEN, endpoint=hub.endpoint)
    assert hub.requests == []


def test_an_absurd_config_size_fails_fast_naming_the_field(hub, tiny_model_dir, tmp_path):
    folder = copy_model(tiny_model_dir, tmp_path / "huge")
    edit_config(folder, max_position_embeddings=100_000_000)  # would be a 100 GB sinusoidal table at d_model 256
    started = time.perf_counter()
    with pytest.raises(PublishError, match="max_position_embeddings must be at most 65,536, got 100,000,000"):
        push_folder(folder, "someone/huge", token=TOKEN, endpoint=hub.endpoint)
    assert time.perf_counter() - started < 10
    with pytest.raises(ValueError, match="max_position_embeddings must be at most 65,536"):
        AutoConfig.from_pretrained(folder, trust_remote_code=True, local_files_only=True)
    assert hub.requests == []


def test_a_space_with_a_broken_model_inside_is_refused(hub, space_dir, tiny_model_dir):
    model = copy_model(tiny_model_dir, space_dir / "models" / "tiny")
    (model / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(PublishError, match=f"{model} does not load"):
        push_folder(space_dir, "someone/demo", repo_type="space", token=TOKEN, endpoint=hub.endpoint)
    assert hub.requests == []


def test_command_line_writes_the_card_for_the_hub_id_and_leaves_the_local_folder_alone(hub, tiny_model_dir, tmp_path):
    folder = copy_model(tiny_model_dir, tmp_path / "my-run")
    write_eval_results(
        folder,
        num_parameters=123,
        decoding={"num_beams": 4},
        command=["python train.py --output_dir my-run"],
        scores={"test_2016_flickr": {"bleu": 1.5, "chrf": 20.0, "num_sentences": 3}},
    )
    write_model_card(folder, config=AutoConfig.from_pretrained(folder, trust_remote_code=True))
    local = folder_files(folder)
    assert "someone/pushed-model" not in local["README.md"].decode()

    assert publish.main([str(folder), "someone/pushed-model", "--endpoint", hub.endpoint, "--token", TOKEN]) == 0
    pushed = hub.files("someone/pushed-model")
    card = pushed.pop("README.md").decode()
    assert 'model_id = "someone/pushed-model"' in card and str(tmp_path) not in card
    assert pushed == {name: data for name, data in local.items() if name != "README.md"}
    assert folder_files(folder) == local  # the local folder and its card are untouched


def scored_model_folder(tiny_model_dir: Path, folder: Path) -> Path:
    """A model folder with scores and a card: the kind publish.py stages in a temporary copy."""
    copy_model(tiny_model_dir, folder)
    write_eval_results(
        folder,
        num_parameters=123,
        decoding={"num_beams": 4},
        command=["python train.py --output_dir my-run"],
        scores={"test_2016_flickr": {"bleu": 1.5, "chrf": 20.0, "num_sentences": 3}},
    )
    write_model_card(folder, config=AutoConfig.from_pretrained(folder, trust_remote_code=True))
    return folder


def test_messages_name_the_users_folder_not_the_staged_copy(tiny_model_dir, tmp_path, capsys, monkeypatch):
    folder = scored_model_folder(tiny_model_dir, tmp_path / "my-run")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # the push is refused after staging, naming the folder
    assert publish.main([str(folder), "someone/offline"]) == 1
    message = capsys.readouterr().err.strip().splitlines()[-1].split("\r")[-1]  # after the loading progress bar
    assert message.startswith(f"error: Cannot push {folder} to the model repo") and "publish-" not in message


def test_a_corrupt_config_is_one_line_naming_the_users_folder(tiny_model_dir, tmp_path, capsys):
    folder = scored_model_folder(tiny_model_dir, tmp_path / "my-run")
    (folder / "config.json").write_text('{"model_type": "transformer_mt", "d_model": ', encoding="utf-8")
    assert publish.main([str(folder), "someone/corrupt"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {folder} does not load") and "\n" not in err


def test_a_hub_that_stalls_mid_upload_is_given_up_in_one_line_and_a_later_run_finishes(tiny_model_dir, capsys, online):
    """The Hub reads half the commit and never answers, twice (huggingface_hub sends a timed-out commit again): the
    push gives up after its timeout, in one line; the same command run again lands the folder."""
    with LoopbackHub(token=TOKEN, stalled_commits=2) as hub:
        command = [
            str(tiny_model_dir),
            "someone/stalled",
            "--endpoint",
            hub.endpoint,
            "--token",
            TOKEN,
            "--timeout",
            "1",
        ]
        started = time.perf_counter()
        assert publish.main(command) == 1
        assert time.perf_counter() - started < 30
        printed = capsys.readouterr()
        error = printed.err.strip()
        assert (
            error.startswith(
                f"error: Cannot push to the model repo 'someone/stalled': {hub.endpoint} stopped "
                "answering while uploading"
            )
            and "\n" not in error
        )
        assert "Run the same command again" in error
        assert "[push] no answer to POST /api/models/someone/stalled/commit/main within 1 s" in printed.out
        assert hub.repo("someone/stalled").commits == []
        assert hub.requests.count(("POST", "/api/models/someone/stalled/commit/main")) == 2

        assert publish.main(command) == 0  # the Hub answers again
        assert capsys.readouterr().out.strip().splitlines()[-1] == f"{hub.endpoint}/someone/stalled"
        assert hub.files("someone/stalled") == folder_files(tiny_model_dir)


def test_every_request_of_a_push_is_bounded_even_one_asked_to_wait_forever(online):
    """huggingface_hub passes timeout=None on some calls: inside a push the bound applies to them too."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()  # accepts connections, never answers
        url = f"http://127.0.0.1:{server.getsockname()[1]}/api/whoami-v2"
        started = time.perf_counter()
        with push_module.bounded_hub_requests(timeout=0.5), pytest.raises(Exception) as error:
            get_session().get(url, timeout=None)
        assert push_module._is_timeout(error.value) and time.perf_counter() - started < 5
