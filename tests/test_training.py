"""transformer_en_de/training/loop.py: batches of about N tokens, the training loss on real target tokens only, and an
output folder that a full disk leaves with whole checkpoints only."""

import datetime
import os
import pickle
import random
import resource
import shutil
import signal
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import numpy
import pytest
import torch
from conftest import DATA_DIR, ROOT, tiny_config
from test_train import tiny_run_flags

import train
from modeling import TransformerMTForConditionalGeneration
from modeling.modeling_transformer_mt import label_smoothed_cross_entropy
from transformer_en_de.training.loop import TokenBatchSampler, resolve_resume, scored_loss


def test_token_batches_hold_every_pair_once_within_the_budget():
    lengths = [random.Random(index).randint(3, 40) for index in range(500)]
    sampler = TokenBatchSampler(lengths, max_tokens=300, seed=0)
    first, second = list(sampler), list(sampler)
    for batches in (first, second):
        assert len(batches) == len(sampler)  # the Trainer counts steps with len()
        assert sorted(index for batch in batches for index in batch) == list(range(500))
        assert all(len(batch) * max(lengths[index] for index in batch) <= 300 for batch in batches)
    assert first != second  # another order every epoch
    short = [batch for batch in first if max(lengths[index] for index in batch) <= 10]
    long = [batch for batch in first if min(lengths[index] for index in batch) >= 30]
    assert min(map(len, short)) > max(map(len, long))  # many short sentences to a batch, few long ones


def test_scored_loss_is_the_smoothed_loss_of_the_full_logits_with_the_same_gradients(tiny_tokenizer):
    sources = (DATA_DIR / "val.en").read_text(encoding="utf-8").splitlines()[:6]
    targets = (DATA_DIR / "val.de").read_text(encoding="utf-8").splitlines()[:6]
    batch = tiny_tokenizer(
        sources, text_target=targets, padding=True, truncation=True, max_length=48, return_tensors="pt"
    )
    batch["labels"] = batch["labels"].masked_fill(batch["labels"] == tiny_tokenizer.pad_token_id, -100)
    assert (batch["labels"] == -100).any()  # padded targets: the positions scored_loss leaves out
    torch.manual_seed(0)
    model = TransformerMTForConditionalGeneration(tiny_config(tiny_tokenizer, dropout=0.0)).train()

    expected = label_smoothed_cross_entropy(model(**batch).logits, batch["labels"], model.config.label_smoothing)
    expected.backward()
    expected_grads = [parameter.grad.clone() for parameter in model.parameters()]
    model.zero_grad()
    loss = scored_loss(model, batch)
    loss.backward()
    assert torch.allclose(loss, expected, atol=1e-6)
    for parameter, grad in zip(model.parameters(), expected_grads, strict=True):
        assert torch.allclose(parameter.grad, grad, atol=1e-6)


@contextmanager
def small_disk(folder: Path, size: str):
    """A tmpfs of `size` mounted at `folder` (True), where this process may mount one (root); else False."""
    folder.mkdir()
    mounted = (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True
        ).returncode
        == 0
    )
    try:
        yield mounted
    finally:
        if mounted:
            subprocess.run(["umount", str(folder)], check=True)


@pytest.mark.slow
def test_a_disk_that_fills_while_a_checkpoint_is_written_is_one_line_and_leaves_no_half_checkpoint(tmp_path):
    """A real full disk: a tiny run on a 680 kB tmpfs has room for its first checkpoint, not its second, whose
    weights (safetensors, written in Rust: SafetensorError, not OSError) stop half-way. Where nothing can be mounted,
    a file-size limit below the weights' size makes the same writer fail the same way, at the first checkpoint."""
    disk = tmp_path / "disk"
    with small_disk(disk, "680k") as mounted:
        output_dir = disk / "out"
        limit = None if mounted else 100_000  # bytes: the tokenizer and the code fit, the weights (128 kB) not

        def limit_file_size():
            if limit:
                signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write then fails with EFBIG instead of killing us
                resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

        result = subprocess.run(
            [sys.executable, "train.py", *tiny_run_flags(DATA_DIR, output_dir, "--num_train_epochs", "2")],
            cwd=ROOT,
            capture_output=True,
            text=True,
            preexec_fn=limit_file_size,
            env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"},
        )

        assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
        last = result.stderr.strip().splitlines()[-1]
        cause = "No space left on device" if mounted else "File too large"
        assert last.startswith(f"error: writing to {output_dir} failed: {cause}")
        assert "--resume_from_checkpoint last" in last
        # The checkpoint being written is gone, so that a resume can only take a whole one.
        assert [path.name for path in output_dir.glob("checkpoint-*")] == (["checkpoint-6"] if mounted else [])
        if mounted:
            assert resolve_resume("last", output_dir) == str(output_dir / "checkpoint-6")
        else:
            with pytest.raises(SystemExit, match="no complete checkpoint"):
                resolve_resume("last", output_dir)


def save_resumable_checkpoint(folder: Path, tokenizer) -> Path:
    """A checkpoint as the Trainer writes one: weights, state, and torch.save files of tensors, numbers and numpy's
    random state (which the Trainer allows when it loads them)."""
    TransformerMTForConditionalGeneration(tiny_config(tokenizer)).save_pretrained(folder)
    (folder / "trainer_state.json").write_text("{}")
    torch.save(
        {"state": {0: {"step": torch.tensor(6.0)}}, "param_groups": [{"lr": 1e-3, "params": [0]}]},
        folder / "optimizer.pt",
    )
    torch.save(
        {"python": random.getstate(), "numpy": numpy.random.get_state(), "cpu": torch.random.get_rng_state()},
        folder / "rng_state.pth",
    )
    return folder


def test_a_checkpoint_whose_optimizer_state_a_safe_load_refuses_is_passed_over_or_one_line(
    tmp_path, tiny_tokenizer, capsys
):
    sound = save_resumable_checkpoint(tmp_path / "checkpoint-3", tiny_tokenizer)
    changed = save_resumable_checkpoint(tmp_path / "checkpoint-6", tiny_tokenizer)
    state = torch.load(changed / "optimizer.pt", weights_only=True)
    torch.save({**state, "saved_at": datetime.datetime(2026, 1, 1)}, changed / "optimizer.pt")  # not tensors
    with pytest.raises(pickle.UnpicklingError):  # what the Trainer's own load would raise, in a traceback
        torch.load(changed / "optimizer.pt", weights_only=True)

    assert resolve_resume("last", tmp_path) == str(sound)
    assert (
        f"passing over {changed}: optimizer.pt holds more than tensors and numbers (it names datetime.datetime)"
        in capsys.readouterr().out
    )

    output_dir = tmp_path / "out"
    with pytest.raises(SystemExit) as refusal:
        train.main(tiny_run_flags(DATA_DIR, output_dir, "--resume_from_checkpoint", str(changed)))
    message = str(refusal.value)
    assert message.startswith(f"error: --resume_from_checkpoint {changed}: optimizer.pt holds more than tensors")
    assert "--overwrite_output_dir" in message and "\n" not in message
    shutil.rmtree(sound)
    with pytest.raises(SystemExit, match=r"none of the 1 complete checkpoint-\* folders .* can be resumed from"):
        resolve_resume("last", tmp_path)
