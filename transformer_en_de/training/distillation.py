"""Word-level knowledge distillation: a trained teacher's whole next-token distribution as a second training target.

The distillation mixes (`--extra_train`) are sequence-level: a teacher's beam translations stand in for references, so
the student learns the teacher's single best output (Kim & Rush, 2016). Word-level distillation adds what the beam
throws away: at every target position the student is also pulled towards the teacher's probabilities over the whole
vocabulary (Hinton et al., 2015), which say how sure the teacher is and which other words it would accept. The loss
of a step is

    (1 - w) * label-smoothed cross-entropy with the target tokens + w * KL(teacher || student)

summed over the real target tokens and divided by their number, so w = 0 is the usual run. The teacher reads the
same batch (teacher forcing on the same targets), in evaluation mode and without gradients; it must share the
student's vocabulary, token for token.
"""

from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from modeling import TransformerMTForConditionalGeneration
from tokenizer import load_tokenizer

from ..decoding.loading import model_folder


@dataclass
class DistillationArguments:
    teacher: str | None = field(
        default=None,
        metadata={
            "help": "Word-level distillation: a trained model of the project (a folder or a Hub id) whose next-token "
            "probabilities the student also learns at every target position, beside the target tokens. It must have "
            "the student's vocabulary (a new model without --tokenizer_name takes the teacher's tokenizer). Costs the "
            "teacher's forward pass each step."
        },
    )
    teacher_weight: float = field(
        default=0.5,
        metadata={
            "help": "With --teacher: the share w of the teacher's term in the loss, (1 - w) * cross-entropy + "
            "w * KL(teacher || student); between 0 and 1."
        },
    )
    # Where the teacher's files are on this machine (the folder itself, or the Hub download): set by check_teacher.
    folder: Path | None = field(default=None, init=False)


@dataclass
class Teacher:
    """A frozen teacher and its share of the loss."""

    model: TransformerMTForConditionalGeneration
    weight: float
    name: str

    def facts(self) -> dict:
        """What eval_results.json records of it."""
        return {"teacher": self.name, "teacher_weight": self.weight}


def check_teacher(args: DistillationArguments, tokenizer_args, training_args) -> None:
    """Before any work (train.py's flags): the weight, and the teacher's folder (a Hub id downloaded, or one line
    saying why not). A run with no tokenizer of its own (a new model without --tokenizer_name, and no tokenizer kept
    in the output folder by an earlier start it goes on from) takes the teacher's: a tokenizer trained afresh would
    never share its vocabulary."""
    if args.teacher is None:
        return
    if not 0.0 <= args.teacher_weight <= 1.0:
        raise SystemExit(f"error: --teacher_weight {args.teacher_weight}: give a share between 0 and 1.")
    try:
        args.folder = model_folder(args.teacher)
    except RuntimeError as error:
        raise SystemExit(f"error: --teacher {args.teacher}: {error}") from None
    kept = (Path(training_args.output_dir) / "tokenizer.json").is_file() and not training_args.overwrite_output_dir
    if not tokenizer_args.tokenizer_name and not kept:
        tokenizer_args.tokenizer_name = str(args.folder)
        print(f"[distillation] the teacher's tokenizer is the run's: {args.teacher}")


def load_teacher(args: DistillationArguments, tokenizer_name: str | Path, tag_token: str | None) -> Teacher | None:
    """The teacher named by --teacher, frozen, or None. Called before the run writes anything: a teacher whose
    vocabulary is not that of the run's tokenizer (`tokenizer_name`, a folder; with `tag_token` added where it is new)
    is refused, and the same command, corrected, can run in the same folder."""
    if args.teacher is None:
        return None
    try:
        model = TransformerMTForConditionalGeneration.from_pretrained(args.folder, use_safetensors=True)
        teacher_vocabulary = load_tokenizer(args.folder).get_vocab()
        vocabulary = load_tokenizer(tokenizer_name).get_vocab()
    except (OSError, ValueError) as error:
        raise SystemExit(f"error: --teacher {args.teacher}: {error}") from None
    if tag_token is not None and tag_token not in vocabulary:
        vocabulary[tag_token] = len(vocabulary)  # the run adds the tag as its next id
    # The same ids for the same tokens, or the KL term would compare unrelated words.
    if teacher_vocabulary != vocabulary or model.config.vocab_size != len(vocabulary):
        raise SystemExit(
            f"error: --teacher {args.teacher} has another vocabulary than the run's tokenizer "
            f"({model.config.vocab_size} embeddings against {len(vocabulary)} tokens, or other tokens): distil from a "
            "model trained with the run's tokenizer, or train the student with the teacher's (--tokenizer_name "
            "TEACHER, the default for a new model)."
        )
    model.eval().requires_grad_(False)
    return Teacher(model, args.teacher_weight, args.teacher)


def kl_to_teacher(student_logits: torch.Tensor, teacher_logits: torch.Tensor, num_items_in_batch=None) -> torch.Tensor:
    """KL(teacher || student) summed over the vocabulary, per scored token: (N, vocab) logits of the same N tokens.
    In float32, as the cross-entropy is: a bf16 log-softmax over the vocabulary is too coarse."""
    student_log_probs = F.log_softmax(student_logits.float(), dim=-1)
    teacher_log_probs = F.log_softmax(teacher_logits.float(), dim=-1)
    kl = F.kl_div(student_log_probs, teacher_log_probs, log_target=True, reduction="sum")
    return kl / (num_items_in_batch if num_items_in_batch is not None else student_logits.shape[0])
