"""Word-level distillation (`train.py --teacher`): the loss is the mix it says, its gradient pulls the student towards
the teacher, a teacher the run cannot use is refused before training, and a run (one process or two) records its
teacher."""

import json
import os
import subprocess
import sys

import pytest
import torch
from conftest import ROOT
from test_train import fine_tune_flags, real_lines, tiny_run_flags, write_pair

import train
from modeling import TransformerMTConfig, TransformerMTForConditionalGeneration
from tokenizer import load_tokenizer, train_tokenizer
from transformer_en_de.evaluation import read_eval_results
from transformer_en_de.training.distillation import Teacher
from transformer_en_de.training.loop import scored_loss

SHIPPED = ROOT / "models" / "transformer-en-de"


def tiny_model(seed: int) -> TransformerMTForConditionalGeneration:
    torch.manual_seed(seed)
    config = TransformerMTConfig(
        vocab_size=50,
        d_model=32,
        encoder_layers=2,
        decoder_layers=1,
        num_attention_heads=4,
        d_ff=64,
        dropout=0.0,
        attention_dropout=0.0,
        max_position_embeddings=32,
        pad_token_id=1,
        decoder_start_token_id=2,
        eos_token_id=2,
        bos_token_id=0,
    )
    return TransformerMTForConditionalGeneration(config)


def batch(seed: int = 0) -> dict:
    """Four pairs of uneven lengths: padded sources, and labels padded with -100."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(3, 50, (4, 9), generator=generator)
    labels = torch.randint(3, 50, (4, 7), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    for row, (source_length, target_length) in enumerate([(9, 7), (6, 5), (4, 3), (8, 2)]):
        input_ids[row, source_length:], attention_mask[row, source_length:] = 1, 0
        labels[row, target_length:] = -100
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def kl_by_hand(student, teacher, inputs: dict) -> torch.Tensor:
    """KL(teacher || student) per real target token, from both models' full forward passes."""
    scored = inputs["labels"] != -100
    student_log_probs = student(**inputs).logits[scored].log_softmax(-1)
    teacher_log_probs = teacher(**inputs).logits[scored].log_softmax(-1)
    return (teacher_log_probs.exp() * (teacher_log_probs - student_log_probs)).sum(-1).mean()


def test_the_loss_is_the_weighted_mix_of_cross_entropy_and_the_kl_to_the_teacher():
    student, other = tiny_model(0).eval(), tiny_model(1).eval()
    inputs = batch()
    with torch.no_grad():
        cross_entropy = scored_loss(student, inputs)
        itself = scored_loss(student, inputs, teacher=Teacher(tiny_model(0).eval(), 0.3, "itself"))
        mixed = scored_loss(student, inputs, teacher=Teacher(other, 0.3, "other"))
        kl = kl_by_hand(student, other, inputs)
    assert kl > 0.01
    torch.testing.assert_close(itself, 0.7 * cross_entropy)  # a teacher that agrees adds nothing
    torch.testing.assert_close(mixed, 0.7 * cross_entropy + 0.3 * kl)


def test_distillation_alone_pulls_the_student_to_the_teacher_and_leaves_the_teacher_alone():
    student, teacher = tiny_model(0).train(), tiny_model(1).eval().requires_grad_(False)
    teacher_weights = {name: tensor.clone() for name, tensor in teacher.state_dict().items()}
    inputs = batch()
    with torch.no_grad():
        before = kl_by_hand(student.eval(), teacher, inputs)
    optimizer = torch.optim.Adam(student.parameters(), lr=3e-3)
    student.train()
    for _ in range(60):
        optimizer.zero_grad()
        scored_loss(student, inputs, teacher=Teacher(teacher, 1.0, "t")).backward()
        optimizer.step()
    with torch.no_grad():
        after = kl_by_hand(student.eval(), teacher, inputs)
    assert after < before / 4, (before, after)
    assert all(torch.equal(tensor, teacher_weights[name]) for name, tensor in teacher.state_dict().items())


def test_a_teacher_the_run_cannot_use_is_refused_before_the_run_writes_anything(tmp_path):
    write_pair(tmp_path, "train", real_lines("en", 0, 96), real_lines("de", 0, 96))
    write_pair(tmp_path, "val", real_lines("en", 2000, 8), real_lines("de", 2000, 8))
    write_pair(tmp_path, "test_2016_flickr", real_lines("en", 3000, 8), real_lines("de", 3000, 8))
    own_tokenizer = tmp_path / "own-tokenizer"
    train_tokenizer(texts=real_lines("en", 0, 96) + real_lines("de", 0, 96), vocab_size=300).save_pretrained(
        own_tokenizer
    )
    # the shipped model's 8,001 tokens against the 300 of the run's own tokenizer
    with pytest.raises(
        SystemExit,
        match=r"--teacher .*transformer-en-de has another vocabulary than the run's "
        r"tokenizer \(8001 embeddings against 300 tokens",
    ):
        train.main(
            tiny_run_flags(tmp_path, tmp_path / "a", "--teacher", str(SHIPPED), "--tokenizer_name", str(own_tokenizer))
        )
    with pytest.raises(SystemExit, match="--teacher ./no-such-model: could not be loaded: there is no model folder"):
        train.main(tiny_run_flags(tmp_path, tmp_path / "b", "--teacher", "./no-such-model"))
    with pytest.raises(
        SystemExit, match="--teacher someone/not-cached: .*Hub is unreachable .offline. and someone/not-cached"
    ):
        train.main(tiny_run_flags(tmp_path, tmp_path / "d", "--teacher", "someone/not-cached"))
    with pytest.raises(SystemExit, match="--teacher_weight 1.5: give a share between 0 and 1"):
        train.main(tiny_run_flags(tmp_path, tmp_path / "c", "--teacher", str(SHIPPED), "--teacher_weight", "1.5"))
    # nothing written: the same command, corrected, runs in the same folder
    assert not [path for name in "abcd" if (tmp_path / name).is_dir() for path in (tmp_path / name).iterdir()]


# ------------------------------------------------------------------------------------- whole runs from a real teacher


@pytest.fixture(scope="module")
def teacher_run(tmp_path_factory):
    """A tiny teacher that learned 24 real pairs by heart (its tokenizer is the students'), and 24 other pairs for the
    students: there the teacher's distribution and the references differ, so a student learns the one it is given."""
    folder = tmp_path_factory.mktemp("teacher")
    for split in ("train", "val", "test_2016_flickr"):
        write_pair(folder, split, real_lines("en", 0, 24), real_lines("de", 0, 24))
        (folder / "students").mkdir(exist_ok=True)
        write_pair(folder / "students", split, real_lines("en", 500, 24), real_lines("de", 500, 24))
    teacher = folder / "teacher"
    train.main(
        tiny_run_flags(
            folder,
            teacher,
            "--num_train_epochs",
            "60",
            "--per_device_train_batch_size",
            "8",
            "--d_model",
            "64",
            "--d_ff",
            "128",
            "--eval_strategy",
            "no",
            "--load_best_model_at_end",
            "false",
            "--save_strategy",
            "no",
        )
    )
    return folder / "students", teacher


def student_flags(data_dir, output_dir, teacher, *extra: str) -> list[str]:
    """A new student (not a fine-tune: its own architecture), trained briefly; without --teacher, with the teacher's
    tokenizer named (with --teacher it is the default)."""
    tokenizer = [] if "--teacher" in extra else ["--tokenizer_name", str(teacher)]
    return [
        *tiny_run_flags(data_dir, output_dir),
        *tokenizer,
        "--num_train_epochs",
        "30",
        "--per_device_train_batch_size",
        "8",
        "--eval_strategy",
        "no",
        "--load_best_model_at_end",
        "false",
        "--save_strategy",
        "no",
        "--test_split",
        "",
        *extra,
    ]


def kl_on_the_pairs(student_dir, teacher_dir, data_dir) -> float:
    tokenizer = load_tokenizer(teacher_dir)
    sources = (data_dir / "train.en").read_text().splitlines()
    targets = (data_dir / "train.de").read_text().splitlines()
    inputs = tokenizer(sources, text_target=targets, padding=True, truncation=True, max_length=64, return_tensors="pt")
    inputs["labels"][inputs["labels"] == tokenizer.pad_token_id] = -100
    student = TransformerMTForConditionalGeneration.from_pretrained(student_dir).eval()
    teacher = TransformerMTForConditionalGeneration.from_pretrained(teacher_dir).eval()
    with torch.no_grad():
        return kl_by_hand(student, teacher, dict(inputs)).item()


@pytest.mark.slow
def test_a_distilled_student_is_closer_to_its_teacher_and_says_so(teacher_run):
    data_dir, teacher = teacher_run
    plain = train.main(student_flags(data_dir, data_dir / "plain", teacher))
    distilled = train.main(
        student_flags(data_dir, data_dir / "distilled", teacher, "--teacher", str(teacher), "--teacher_weight", "1.0")
    )
    assert "teacher" not in plain["training"]
    assert (distilled["training"]["teacher"], distilled["training"]["teacher_weight"]) == (str(teacher), 1.0)
    assert load_tokenizer(data_dir / "distilled").get_vocab() == load_tokenizer(teacher).get_vocab()
    card = (data_dir / "distilled" / "README.md").read_text()
    assert "next-token probabilities of the model teacher " in card and str(teacher) not in card.split("```bash")[0]
    assert "Word-level distillation" not in (data_dir / "plain" / "README.md").read_text()
    kl_plain = kl_on_the_pairs(data_dir / "plain", teacher, data_dir)
    kl_distilled = kl_on_the_pairs(data_dir / "distilled", teacher, data_dir)
    assert kl_distilled < 0.85 * kl_plain, (kl_plain, kl_distilled)


@pytest.mark.slow
def test_a_fine_tune_distils_in_two_processes(teacher_run):
    """Two processes wrap the model in DDP, which the Trainer calls whole: the teacher's term comes in another way
    there (the kept batch), and must still pull the student to the teacher and be recorded."""
    data_dir, teacher = teacher_run
    start = data_dir / "plain-start"
    train.main(student_flags(data_dir, start, teacher, "--num_train_epochs", "1"))
    output_dir = data_dir / "two-processes"
    flags = [
        *fine_tune_flags(data_dir, output_dir, start),
        "--teacher",
        str(teacher),
        "--teacher_weight",
        "1.0",
        "--num_train_epochs",
        "8",
        "--per_device_train_batch_size",
        "4",
        "--eval_strategy",
        "no",
        "--load_best_model_at_end",
        "false",
        "--save_strategy",
        "no",
        "--test_split",
        "",
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", str(ROOT / "train.py"), *flags],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=420,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = read_eval_results(output_dir)
    assert results["training"]["teacher"] == str(teacher)
    assert json.loads((output_dir / "config.json").read_text())["d_model"] == 32  # the start's, not the teacher's
    assert kl_on_the_pairs(output_dir, teacher, data_dir) < 0.8 * kl_on_the_pairs(start, teacher, data_dir)


@pytest.mark.slow
def test_a_resumed_run_keeps_its_own_tokenizer_and_a_teacher_of_another_is_refused(teacher_run, tmp_path):
    """A run that trained its own tokenizer, resumed with --teacher: the tokenizer stays the run's (its checkpoints'
    embeddings are in its ids), so a teacher with other tokens is refused, and nothing of the run changes."""
    data_dir, teacher = teacher_run
    own = tmp_path / "own"
    flags = [
        *tiny_run_flags(data_dir, own),
        "--max_steps",
        "4",
        "--save_steps",
        "2",
        "--eval_strategy",
        "no",
        "--load_best_model_at_end",
        "false",
        "--test_split",
        "",
    ]
    train.main(flags)  # a tokenizer of its own, trained on the students' pairs
    kept = {path.name: path.read_bytes() for path in own.iterdir() if path.is_file()}
    with pytest.raises(SystemExit, match="has another vocabulary than the run's tokenizer"):
        train.main([*flags, "--max_steps", "6", "--resume_from_checkpoint", "last", "--teacher", str(teacher)])
    assert {path.name: path.read_bytes() for path in own.iterdir() if path.is_file()} == kept
