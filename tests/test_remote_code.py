"""A saved folder loads and translates with `trust_remote_code=True` in a fresh Python that never imports the project,
as it would from the Hub."""

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch
from conftest import PAIRS, ROOT, tiny_config

from modeling import TransformerMTForConditionalGeneration

SOURCES = [source for source, _ in PAIRS[:4]] + ["A dog sings on the sofa."]

# Runs in the subprocess: Auto classes only, then reports what it generated and which modules it imported.
LOAD_AND_TRANSLATE = r"""
import json, sys
from pathlib import Path
from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoTokenizer

folder, project_root, sources = sys.argv[1], Path(sys.argv[2]), json.loads(sys.argv[3])
config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
batch = tokenizer(sources, padding=True, return_tensors="pt")
ids = model.generate(**batch, num_beams=4, max_new_tokens=20)
environment = Path(sys.prefix).resolve()  # a virtual environment may live inside the project folder


def from_project_sources(module) -> bool:
    path = Path(getattr(module, "__file__", None) or "/").resolve()
    return project_root in path.parents and environment not in path.parents


from_project = sorted(name for name, module in list(sys.modules.items()) if from_project_sources(module))
print(json.dumps({
    "config_class": f"{type(config).__module__}.{type(config).__name__}",
    "model_class": f"{type(model).__module__}.{type(model).__name__}",
    "input_ids": batch["input_ids"].tolist(),
    "ids": ids.tolist(),
    "modules_from_project": from_project,
}))
"""


@pytest.fixture(scope="module")
def saved_folder(tiny_tokenizer, tmp_path_factory):
    """A briefly trained tiny model (so its translations depend on the source) saved with its tokenizer."""
    torch.manual_seed(0)
    model = TransformerMTForConditionalGeneration(tiny_config(tiny_tokenizer, dropout=0.0))
    batch = tiny_tokenizer([s for s, _ in PAIRS], text_target=[t for _, t in PAIRS], padding=True, return_tensors="pt")
    batch["labels"] = batch["labels"].masked_fill(batch["labels"] == tiny_tokenizer.pad_token_id, -100)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(60):
        optimizer.zero_grad()
        model(**batch).loss.backward()
        optimizer.step()
    folder = tmp_path_factory.mktemp("remote-code") / "transformer-en-de-tiny"
    model.eval().save_pretrained(folder)
    tiny_tokenizer.save_pretrained(folder)
    return folder, model


@pytest.mark.slow
def test_folder_loads_with_trust_remote_code_without_the_project_and_generates_the_same_ids(
    saved_folder, tiny_tokenizer, tmp_path
):
    folder, model = saved_folder
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(tmp_path / "modules"), TOKENIZERS_PARALLELISM="false")
    result = subprocess.run(
        [sys.executable, "-c", LOAD_AND_TRANSLATE, str(folder), str(ROOT), json.dumps(SOURCES)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])

    # The classes came from the code copied into the folder, and nothing was imported from the project.
    assert report["config_class"].startswith("transformers_modules.")
    assert report["config_class"].endswith("configuration_transformer_mt.TransformerMTConfig")
    assert report["model_class"].startswith("transformers_modules.")
    assert report["model_class"].endswith("modeling_transformer_mt.TransformerMTForConditionalGeneration")
    assert report["modules_from_project"] == []

    batch = tiny_tokenizer(SOURCES, padding=True, return_tensors="pt")
    assert report["input_ids"] == batch["input_ids"].tolist()
    with torch.no_grad():
        expected = model.generate(**batch, num_beams=4, max_new_tokens=20)
    assert report["ids"] == expected.tolist()
    assert len({tuple(row) for row in report["ids"]}) > 1  # translations differ by source: a real comparison


@pytest.mark.parametrize("version", ["4.57.0", "5.3.0"])
def test_remote_code_on_a_release_below_the_range_says_which_it_needs(tmp_path, version):
    """Older releases cannot be installed beside the pinned one here: the test makes the installed one report
    `version` (tests/test_transformers_releases.py runs the real oldest release)."""
    folder = ROOT / "models" / "transformer-en-de"
    script = (
        "import sys, transformers\n"
        f"transformers.__version__ = {version!r}\n"
        f"sys.path.insert(0, {str(folder)!r})\n"
        "import configuration_transformer_mt\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode != 0
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line == (
        f"ImportError: This model's code needs transformers>=5.10.4,<6, but transformers {version} is installed: "
        "run `pip install 'transformers>=5.10.4,<6'`."
    )


# Runs in the subprocess, from a copy of the shipped folder: what a Hub user can ask of transformers' generate().
HUB_USER_CONTRACT = r"""
import json, logging, sys, warnings
import torch
from transformers import AutoModel, AutoModelForSeq2SeqLM, AutoTokenizer

folder, sources = sys.argv[1], json.loads(sys.argv[2])
messages = []
handler = logging.Handler()
handler.emit = lambda record: messages.append(record.getMessage())
logging.getLogger("transformers").addHandler(handler)
warnings.showwarning = lambda message, *args, **kwargs: messages.append(str(message))

bare = AutoModel.from_pretrained(folder, trust_remote_code=True)
model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
batch = tokenizer(sources, padding=True, return_tensors="pt")
report = {"bare_class": f"{type(bare).__module__}.{type(bare).__name__}"}
with torch.inference_mode():
    for num_beams in (1, 4):
        report[f"dynamic_{num_beams}"] = model.generate(**batch, num_beams=num_beams).tolist()
        report[f"static_{num_beams}"] = model.generate(
            **batch, num_beams=num_beams, cache_implementation="static"
        ).tolist()
        report[f"explicit_{num_beams}"] = model.generate(
            **batch, num_beams=num_beams, min_new_tokens=40, max_new_tokens=48
        ).tolist()
    # dynamo traces the whole forward (fullgraph) at every step of a static-cache greedy search; the eager backend
    # runs the traced graph without generating kernels (minutes on a small CPU), which is not what is tested here.
    model.forward = torch.compile(model.forward, fullgraph=True, backend="eager")
    report["compiled_1"] = model.generate(**batch, num_beams=1, cache_implementation="static").tolist()
report["messages"] = messages
print(json.dumps(report))
"""


@pytest.mark.slow
def test_a_copy_of_the_shipped_folder_keeps_transformers_generate_contract(tmp_path):
    """From a copy of the shipped folder, in a Python that cannot import the project: `AutoModel` loads the bare
    encoder-decoder, a static cache gives the ids of the dynamic one (greedy and beam), a caller's
    `min_new_tokens` / `max_new_tokens` replace the saved per-sentence bound (no "Unfeasible length constraints"),
    and a forward compiled with `fullgraph=True` gives the same ids."""
    folder = tmp_path / "transformer-en-de"
    shutil.copytree(ROOT / "models" / "transformer-en-de", folder)
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(tmp_path / "modules"), TOKENIZERS_PARALLELISM="false")
    sources = ["Two dogs are playing in the snow.", "A man in a red jacket reads a newspaper on a bench."]
    result = subprocess.run(
        [sys.executable, "-c", HUB_USER_CONTRACT, str(folder), json.dumps(sources)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])

    assert report["bare_class"].startswith("transformers_modules.")
    assert report["bare_class"].endswith("modeling_transformer_mt.TransformerMTModel")
    for num_beams in (1, 4):
        assert report[f"static_{num_beams}"] == report[f"dynamic_{num_beams}"]
        explicit = torch.tensor(report[f"explicit_{num_beams}"])
        new_tokens = (explicit[:, 1:] != 0).sum(dim=-1)  # 0: the padding id
        assert explicit.shape[1] - 1 <= 48 and int(new_tokens.min()) >= 40
        bounded = torch.tensor(report[f"dynamic_{num_beams}"])
        assert bounded.shape[1] - 1 < 40  # the saved bound alone stops both sentences well before 40 tokens
    assert report["compiled_1"] == report["dynamic_1"]
    assert not [message for message in report["messages"] if "Unfeasible" in message]


def test_the_hub_code_calls_no_private_torch_ops():
    """The folder's code runs on any PyTorch a Hub user has: no `torch.ops` (private kernels), only public APIs."""
    code_files = sorted((ROOT / "models" / "transformer-en-de").glob("*.py")) + sorted((ROOT / "modeling").glob("*.py"))
    assert code_files
    assert not [path.name for path in code_files if "torch.ops" in path.read_text()]


def test_the_shipped_defaults_decode_with_our_beam_search(monkeypatch):
    """The shipped generation config leaves `use_cache` unset (None, generate()'s default: a cache): a plain
    `generate()` still hands its loop to `compact_beam_search`, and its ids are transformers' own loop's."""
    import modeling.modeling_transformer_mt as modeling_code

    folder = ROOT / "models" / "transformer-en-de"
    model = TransformerMTForConditionalGeneration.from_pretrained(folder).eval()
    assert model.generation_config.use_cache is None and model.generation_config.num_beams > 1
    calls = []
    search = modeling_code.compact_beam_search
    monkeypatch.setattr(modeling_code, "compact_beam_search", lambda *a, **k: calls.append(k) or search(*a, **k))
    batch = {
        "input_ids": torch.tensor([[75, 391, 1163, 17, 2], [75, 2, 0, 0, 0]]),
        "attention_mask": torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]),
    }
    with torch.inference_mode():
        ours = model.generate(**batch)
        model.drop_finished_sentences = False
        theirs = model.generate(**batch)
    assert len(calls) == 1 and calls[0]["drop_finished"] is True
    assert torch.equal(ours, theirs)
