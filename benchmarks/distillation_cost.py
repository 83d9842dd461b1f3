"""What word-level distillation (`train.py --teacher`) costs a training step: a student's step with and without the
teacher's term, timed in turns (A, B, A, B) on the same real Multi30k batches, in the precision train.py picks here.

The student is the deep-encoder, shallow-decoder shape of model round 7 (the shipped model's size with 6 encoder
layers and 1 decoder layer, random weights: speed does not depend on them); the teacher is the shipped model (or a
random model of its size where there is none), frozen, in evaluation mode. One step = the student's forward, the loss
(`transformer_en_de.training.loop.scored_loss`, with or without the teacher), backward and an AdamW step.

    python -m benchmarks.distillation_cost [--quick] [--threads 1] [--batch-size 128]
"""

import torch

from benchmarks import harness
from benchmarks.train_throughput import adamw, training_step
from modeling import TransformerMTForConditionalGeneration
from transformer_en_de.training import precision
from transformer_en_de.training.distillation import Teacher
from transformer_en_de.training.loop import scored_loss


def shipped_teacher(config) -> TransformerMTForConditionalGeneration:
    if (harness.SHIPPED_DIR / "model.safetensors").is_file():
        return TransformerMTForConditionalGeneration.from_pretrained(harness.SHIPPED_DIR)
    return TransformerMTForConditionalGeneration(config)


def main():
    args, config, rounds, batches = harness.training_setup(__doc__.splitlines()[0])
    target_tokens = sum(int((batch["labels"] != -100).sum()) for batch in batches)
    teacher = Teacher(shipped_teacher(config).eval().requires_grad_(False), 0.5, "shipped")
    student_config = harness.shipped_config(encoder_layers=6, decoder_layers=1, dropout=0.1)

    students = {}
    for name in ("student alone", "student + teacher"):
        torch.manual_seed(0)
        students[name] = TransformerMTForConditionalGeneration(student_config).train()
    timings = harness.alternate(
        {
            "student alone": training_step(
                students["student alone"], scored_loss, adamw(students["student alone"]), batches, args.bf16
            ),
            "student + teacher": training_step(
                students["student + teacher"],
                lambda model, batch: scored_loss(model, batch, teacher=teacher),
                adamw(students["student + teacher"]),
                batches,
                args.bf16,
            ),
        },
        rounds=rounds,
        warmup=1,
    )
    print(f"# Word-level distillation's cost ({harness.describe_machine(args.threads)})")
    print(
        f"# student {student_config.encoder_layers}+{student_config.decoder_layers} layers, teacher "
        f"{teacher.model.config.encoder_layers}+{teacher.model.config.decoder_layers} "
        f"(d_model {student_config.d_model}, vocab {student_config.vocab_size}); {precision.name(args.bf16)}, AdamW; "
        f"{len(batches)} batches of "
        f"{args.batch_size} Multi30k pairs ({target_tokens} target tokens) per round, {rounds} rounds"
    )
    harness.print_table(
        ["step", "wall s/round: median [IQR]", "CPU s/round", "target tokens/s"],
        [
            [name, harness.spread(t.wall), f"{t.cpu_seconds:.3g}", f"{target_tokens / t.seconds:,.0f}"]
            for name, t in timings.items()
        ],
    )
    alone, taught = timings["student alone"], timings["student + teacher"]
    print(
        f"ratio student + teacher / student alone (time a step): {taught.seconds / alone.seconds:.2f}x wall, "
        f"{taught.cpu_seconds / alone.cpu_seconds:.2f}x CPU time"
    )


if __name__ == "__main__":
    main()
