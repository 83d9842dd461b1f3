"""What train.py adds to transformers' `Seq2SeqTrainer`: validation BLEU/chrF through the engine, a loss that projects
only real target tokens onto the vocabulary (and adds a teacher's term on request), batches of about N tokens
(fairseq's --max-tokens), a loss line even in short runs, a resume at the learning rate its command asks, the model to
train (new, or a trained one to fine-tune), and an output folder that loses nothing (a finished run is never
overwritten by accident; resuming passes over a damaged checkpoint; a failed write is one clear line; a push that
could not happen is refused before training).
"""

import dataclasses
import errno
import logging
import os
import random
import re
import shutil
from pathlib import Path

import torch
from accelerate.utils import broadcast_object_list
from huggingface_hub import constants
from torch.utils.data import DataLoader, Sampler
from transformers import Seq2SeqTrainer, TrainerCallback

from modeling import TransformerMTConfig, TransformerMTForConditionalGeneration
from modeling.modeling_transformer_mt import label_smoothed_cross_entropy
from tokenizer import config_token_fields

from .. import heap
from ..decoding.loading import model_folder
from ..evaluation import score_model
from ..hub_access import hub_is_reachable
from .checkpoints import complete_checkpoints, damaged_checkpoint, restore_translation_defaults, validation_curve
from .dataset import dataset_facts
from .distillation import Teacher, kl_to_teacher
from .flags import CONFIG_DEFAULTS

trainer_logger = logging.getLogger("transformers.trainer")  # where the Trainer warns of missing keys

# ------------------------------------------------------------------------------------------------------------ batching


class TokenBatchSampler(Sampler):
    """Batches of at most `max_tokens` padded tokens (fairseq's --max-tokens): pairs sorted by length, packed greedily,
    the batches shuffled again every epoch.

    A batch of short sentences holds many more of them than one of long sentences, so every step does about the same
    work and almost nothing is padding. A pair's size is the longer of its source and target (each padded to the
    longest in its batch). The packing depends only on the lengths, so the number of batches per epoch is fixed.
    """

    def __init__(self, lengths: list[int], max_tokens: int, seed: int = 0):
        if max_tokens < max(lengths):
            raise ValueError(
                f"--max_tokens {max_tokens} is below the longest pair ({max(lengths)} tokens): raise it, or lower "
                "--max_source_length/--max_target_length."
            )
        self.lengths, self.max_tokens, self.seed, self.epoch = lengths, max_tokens, seed, 0
        self.num_batches = len(self._pack(sorted(range(len(lengths)), key=lengths.__getitem__)))

    def _pack(self, order: list[int]) -> list[list[int]]:
        batches, batch, longest = [], [], 0
        for index in order:
            longest_with = max(longest, self.lengths[index])
            if batch and longest_with * (len(batch) + 1) > self.max_tokens:
                batches.append(batch)
                batch, longest_with = [], self.lengths[index]
            batch.append(index)
            longest = longest_with
        return batches + [batch] if batch else batches

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        rng = random.Random(self.seed + self.epoch)
        # Random order among equal lengths, so each epoch mixes other sentences into the batches.
        order = sorted(range(len(self.lengths)), key=lambda index: (self.lengths[index], rng.random()))
        batches = self._pack(order)
        rng.shuffle(batches)
        self.epoch += 1  # the next pass shuffles differently, whether or not the caller calls set_epoch
        yield from batches

    def __len__(self) -> int:
        return self.num_batches


# ------------------------------------------------------------------------------------------------------------- trainer


class TranslationTrainer(Seq2SeqTrainer):
    """Seq2SeqTrainer whose evaluation adds BLEU and chrF of the validation sentences, translated through the engine
    with the model's own decoding on the main process: every real sentence once, in file order, however many
    processes train. (A distributed generate-and-gather would pad the last batch with repeated sentences and decode
    each shard in other batches.) The other processes wait for the scores, so every process chooses the same best
    checkpoint. With `max_tokens`, training batches hold about that many tokens instead of a number of sentences."""

    def __init__(
        self,
        *args,
        validation: tuple[list[str], list[str]],
        max_tokens: int | None = None,
        teacher: Teacher | None = None,
        **kwargs,
    ):
        super().__init__(*args, compute_loss_func=self.smoothed_loss, **kwargs)
        self.validation = validation
        self.max_tokens = max_tokens
        self.teacher = teacher
        self.teacher_batch: dict = {}  # the batch a DDP-wrapped model is called on whole, for its teacher
        if teacher is not None:
            teacher.model.to(self.args.device)

    def smoothed_loss(self, outputs, labels, num_items_in_batch=None) -> torch.Tensor:
        """The Trainer's loss from the logits: label-smoothed while training (section 5.4), the plain cross-entropy in
        evaluation (the model's own loss, comparable across models)."""
        epsilon = self.model.config.label_smoothing if self.model.training else 0.0
        loss = label_smoothed_cross_entropy(outputs.logits, labels, epsilon, num_items_in_batch)
        if self.teacher is None or not self.model.training:
            return loss
        # A DDP-wrapped model, called whole by compute_loss: the teacher reads the batch compute_loss kept for it.
        inputs = {**self.teacher_batch, "labels": labels}
        with self.accelerator.autocast():
            return distilled(loss, outputs.logits[labels != -100], inputs, self.teacher, num_items_in_batch)

    def get_train_dataloader(self) -> DataLoader:
        if not self.max_tokens:
            return super().get_train_dataloader()
        dataset = self._remove_unused_columns(self.train_dataset, description="Training")
        lengths = [
            max(len(source), len(target))
            for source, target in zip(dataset["input_ids"], dataset["labels"], strict=True)
        ]
        batches = TokenBatchSampler(lengths, self.max_tokens * self.args.world_size, seed=self.args.seed)
        loader = DataLoader(
            dataset, batch_sampler=batches, collate_fn=self.data_collator, num_workers=self.args.dataloader_num_workers
        )
        return self.accelerator.prepare(loader)  # with several processes, each takes its share of every batch

    def evaluation_loop(
        self, dataloader, description, prediction_loss_only=None, ignore_keys=None, metric_key_prefix="eval"
    ):
        output = super().evaluation_loop(dataloader, description, prediction_loss_only, ignore_keys, metric_key_prefix)
        scores = [None]
        if self.is_world_process_zero():
            _, split_scores = score_model(as_saved(self.model), self.processing_class, *self.validation)
            scores = [{name: split_scores[name] for name in ("bleu", "chrf", "num_sentences")}]
        if self.args.world_size > 1:
            broadcast_object_list(scores)
        output.metrics.update({f"{metric_key_prefix}_{name}": value for name, value in scores[0].items()})
        return output

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if return_outputs or not model.training or model is not self.accelerator.unwrap_model(model):
            # Evaluation wants the logits; a DDP-wrapped model must be called whole, or its gradients are not synced.
            self.teacher_batch = dict(inputs)  # the Trainer takes the labels out of `inputs`
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        # Mixed precision wraps the model's forward only; scored_loss calls the model's parts, so it asks for it itself.
        with self.accelerator.autocast():
            return scored_loss(model, inputs, num_items_in_batch, self.teacher)

    def train(self, *args, **kwargs):
        """A checkpoint this run could not write to the end (a full disk) is removed, not left for a resume to pass
        over: it frees what it took, and nothing half-written is ever taken for a checkpoint."""
        run_dir = Path(self.args.output_dir)
        before = set(run_dir.glob("checkpoint-*"))
        tied_aliases = TiedAliasesNotMissing(self.model)
        trainer_logger.addFilter(tied_aliases)
        try:
            return super().train(*args, **kwargs)
        except BaseException:
            if self.args.should_save:
                for folder in set(run_dir.glob("checkpoint-*")) - before - set(complete_checkpoints(run_dir)):
                    shutil.rmtree(folder, ignore_errors=True)
            raise
        finally:
            trainer_logger.removeFilter(tied_aliases)


class TiedAliasesNotMissing(logging.Filter):
    """A checkpoint stores a tied tensor once (the shared embedding); its aliases (the encoder's and decoder's
    embedding, lm_head) are "missing" from it when the Trainer loads it, and tied all the same (they are the same
    parameter): not worth the Trainer's alarming warning, which names only the keys really missing."""

    MISSING = "There were missing keys in the checkpoint model loaded: "

    def __init__(self, model):
        super().__init__()
        self.tied = set(model.all_tied_weights_keys)

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if not message.startswith(self.MISSING):
            return True
        missing = [key for key in re.findall(r"'([^']+)'", message) if key not in self.tied]
        record.msg, record.args = f"{self.MISSING}{missing}.", ()
        return bool(missing)


def as_saved(model):
    """A copy of `model` as its checkpoint loads: the same weights, computed in float32.

    With mixed precision, accelerate wraps the training model's forward in autocast; scored as it is, validation would
    decode in bf16 where the machine has it natively (an AMX or AVX-512 BF16 CPU, a recent GPU) and give other scores
    than the saved checkpoint gives a user. The validation curve chooses checkpoints and goes into the model card, so
    it is the saved checkpoint's score."""
    copy = type(model)(model.config).to(model.device)
    copy.load_state_dict(model.state_dict())
    copy.generation_config = model.generation_config
    return copy.eval()


def scored_loss(model, inputs: dict, num_items_in_batch=None, teacher: Teacher | None = None) -> torch.Tensor:
    """The label-smoothed training loss (section 5.4), the output projection applied to the real target tokens only;
    with a `teacher`, mixed with the word-level distillation term (`distillation.py`).

    `model(**inputs).loss` projects every position, padding too, onto the vocabulary before the loss drops the padded
    ones: the largest matrix multiply of a step (d_model x vocab per position, forward and backward), a third of it
    wasted on padding in a Multi30k batch. Same loss, same gradients.
    """
    logits, labels = scored_logits(model, inputs)
    loss = label_smoothed_cross_entropy(logits, labels, model.config.label_smoothing, num_items_in_batch)
    return loss if teacher is None else distilled(loss, logits, inputs, teacher, num_items_in_batch)


def distilled(loss: torch.Tensor, logits: torch.Tensor, inputs: dict, teacher: Teacher, num_items_in_batch=None):
    """`loss` mixed with the teacher's term: (1 - w) * loss + w * KL(teacher || student) over the batch's scored
    tokens, whose (N, vocab) student `logits` are given."""
    with torch.no_grad():
        teacher_logits, _ = scored_logits(teacher.model, inputs)
    kl = kl_to_teacher(logits, teacher_logits, num_items_in_batch)
    return (1 - teacher.weight) * loss + teacher.weight * kl


def scored_logits(model, inputs: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """The (N, vocab) logits of the N real target tokens of a batch (teacher forcing), and those N labels."""
    labels = inputs["labels"]
    decoder_input_ids = inputs.get("decoder_input_ids")
    if decoder_input_ids is None:
        decoder_input_ids = model.prepare_decoder_input_ids_from_labels(labels)
    hidden = model.model(
        inputs["input_ids"],
        attention_mask=inputs.get("attention_mask"),
        decoder_input_ids=decoder_input_ids,
        use_cache=False,
    ).last_hidden_state  # (B, T, d_model)
    scored = labels != -100  # (B, T)
    return model.lm_head(hidden[scored]), labels[scored]


# ------------------------------------------------------------------------------------------------------------- model
#
# train.py's model flags are the fields of `TransformerMTConfig`; `model_args` below is its `ModelArguments`.

# What fine-tuning may change in a trained model; the rest of its architecture is its weights' shape.
REGULARISATION_FIELDS = ("dropout", "attention_dropout", "activation_dropout", "label_smoothing")


def resolve_architecture(model_args, start_args, tokenizer_args) -> Path | None:
    """Fill the model flags not given: from the config's defaults, or when fine-tuning from the trained model (whose
    folder, downloaded for a Hub id, is returned; its tokenizer becomes the run's), refusing architecture flags that
    its weights could not follow."""
    names = [model_field.name for model_field in dataclasses.fields(model_args)]
    given = {name: value for name, value in dataclasses.asdict(model_args).items() if value is not None}
    if not start_args.model_name_or_path:
        for name in names:
            setattr(model_args, name, given.get(name, CONFIG_DEFAULTS[name]))
        return None
    fixed = [f"--{name}" for name in given if name not in REGULARISATION_FIELDS]
    if fixed:
        raise SystemExit(
            f"error: {' '.join(fixed)} cannot change a trained model: --model_name_or_path "
            f"{start_args.model_name_or_path} brings its own architecture. Drop the flag, or train from scratch."
        )
    try:
        folder = model_folder(start_args.model_name_or_path)
        config = TransformerMTConfig.from_pretrained(folder)
    except (RuntimeError, OSError, ValueError) as error:
        raise SystemExit(f"error: --model_name_or_path {start_args.model_name_or_path}: {error}") from None
    for name in names:
        setattr(model_args, name, given.get(name, getattr(config, name)))
    tokenizer_args.tokenizer_name = tokenizer_args.tokenizer_name or str(folder)
    return folder


def model_to_train(model_args, start_folder: Path | None, tokenizer, tag_token: str | None):
    """A new model of the flags' architecture, decoding its validation as the shipped folder will (beam 4, the length
    bound); or, fine-tuning, the trained model in `start_folder` with the flags' regularisation."""
    if start_folder is None:
        config = TransformerMTConfig(**config_token_fields(tokenizer), **dataclasses.asdict(model_args))
        model = TransformerMTForConditionalGeneration(config)
        restore_translation_defaults(model)
        return model
    regularisation = {name: getattr(model_args, name) for name in REGULARISATION_FIELDS}
    try:
        return model_to_fine_tune(start_folder, tokenizer, regularisation, tag_token)
    except ValueError as error:
        raise SystemExit(f"error: {error}") from None


def model_to_fine_tune(folder: Path, tokenizer, regularisation: dict, tag_token: str | None):
    """The trained model in `folder` to fine-tune, with this run's `regularisation` (config overrides such as dropout),
    and one embedding more when the run's tokenizer added the tag token (initialised near the mean of the others, so
    the first steps are not thrown off)."""
    model = TransformerMTForConditionalGeneration.from_pretrained(folder, use_safetensors=True, **regularisation)
    config = model.config
    added = len(tokenizer) - config.vocab_size
    tag_is_new = tag_token is not None and tokenizer.convert_tokens_to_ids(tag_token) == config.vocab_size
    if added and not (added == 1 and tag_is_new):
        raise ValueError(
            f"the tokenizer has {len(tokenizer)} tokens but the model in {folder} has {config.vocab_size} "
            "embeddings: fine-tune with the model's own tokenizer (leave out --tokenizer_name)."
        )
    if added:
        model.resize_token_embeddings(len(tokenizer))
        print(f"[model] embedding {config.vocab_size} added for {tag_token}")
    return model


def training_facts(
    trainer, starting_step: int, data_args, training_set, fine_tuned_from: str | None, tag_token: str | None
) -> dict:
    """What eval_results.json records of the run: its validation curve, steps, best checkpoint and data."""
    best = trainer.state.best_model_checkpoint
    facts = {
        "validation_split": data_args.validation_split,
        "validation_curve": validation_curve(trainer.state.log_history),
        "trained_steps": {"from": starting_step, "to": trainer.state.global_step},
        "best_checkpoint": Path(best).name if best else None,
        "corpora": training_set.facts(data_args.tag_token),
        "dataset": dataset_facts(data_args),
    }
    if fine_tuned_from:
        facts["fine_tuned_from"] = fine_tuned_from
    if data_args.case_augmentation:
        facts["case_augmentation"] = data_args.case_augmentation
    if tag_token:
        facts["tag_token"] = tag_token
    return facts


class StartingStep(TrainerCallback):
    """Remembers the step this process started training at: 0, or the step of the checkpoint it resumed."""

    step = 0

    def on_train_begin(self, args, state, control, **kwargs):
        self.step = state.global_step
        if self.step:
            print(f"[train] resumed at step {self.step} of {state.max_steps}")


class ResumedAtRequestedRate(TrainerCallback):
    """A resumed run goes on at the peak learning rate its command asks for. The Trainer rebuilds the schedule's shape
    (warm-up, decay) from the command but restores its scale, the peak, from the checkpoint: without this a resume
    with a new `--learning_rate` went on at the old rate, silently, while a new `--warmup_steps` took effect. The
    schedule keeps its step; every rate of it is scaled by requested / saved peak, and the run says so."""

    change: dict | None = None

    def on_train_begin(self, args, state, control, optimizer=None, lr_scheduler=None, **kwargs):
        scheduler = getattr(lr_scheduler, "scheduler", lr_scheduler)  # accelerate may wrap it
        saved = getattr(scheduler, "base_lrs", None)
        if not state.global_step or not saved or not saved[0] or abs(args.learning_rate / saved[0] - 1) < 1e-6:
            return
        factor = args.learning_rate / saved[0]
        scheduler.base_lrs = [rate * factor for rate in saved]
        scheduler._last_lr = [rate * factor for rate in scheduler.get_last_lr()]
        for group in optimizer.param_groups:
            group["lr"] *= factor
            if "initial_lr" in group:
                group["initial_lr"] *= factor
        self.change = {"at_step": state.global_step, "peak_before": saved[0], "peak_after": args.learning_rate}
        print(
            f"[train] learning rate: the checkpoint's schedule peaks at {saved[0]:.3g}, the command asks "
            f"{args.learning_rate:.3g}: the same schedule scaled by {factor:.3g} from step {state.global_step} "
            f"(now {scheduler.get_last_lr()[0]:.3g})"
        )


class ShortRunLogging(TrainerCallback):
    """At least ten loss lines per run: a run shorter than ten times --logging_steps logs more often."""

    def on_train_begin(self, args, state, control, **kwargs):
        state.logging_steps = max(1, min(state.logging_steps, state.max_steps // 10))


class FreeHeapGivenBack(TrainerCallback):
    """glibc's free heap returned to the system every `every` steps (`heap.give_back`). Each batch has its own shape,
    so its tensors seldom fit where the last batch's were freed: on round 7's run the heap held 5.2 GB, 4.3 GB of it
    free yet resident, after 2,150 steps, and one trim took the process from 6.3 to 2.5 GB (docs/notebook.md, model
    round 7). A trim costs milliseconds and the page faults of the pages touched again."""

    def __init__(self, every: int = 50):
        self.every = every

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step % self.every == 0:
            heap.give_back()


# ------------------------------------------------------------------------------------------------------ output folder


WRITE_ERRNOS = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EACCES, errno.EROFS, errno.EIO)
TORCH_WRITE_ERRORS = ("iostream error", "PytorchStreamWriter failed", "file write failed", "unexpected pos")
# The writers written in Rust (safetensors' SafetensorError, tokenizers' Exception) carry the OS error in their text.
RUST_OS_ERROR = re.compile(r"\(os error (\d+)\)|\bcode: (\d+), kind:")


def check_push(hub_model_id: str | None) -> None:
    """Fail before training, not after it, when the finished folder could not be pushed."""
    if not hub_model_id:
        raise SystemExit("error: --push_to_hub needs --hub_model_id NAME (user/model).")
    if constants.is_offline_mode():
        raise SystemExit(
            "error: --push_to_hub with offline mode on (HF_HUB_OFFLINE=1): unset it on a machine with network access, "
            "or train without --push_to_hub and push the folder later (python publish.py)."
        )
    if not hub_is_reachable():
        raise SystemExit(
            f"error: --push_to_hub: {constants.ENDPOINT} is unreachable. Check the network, or train without "
            "--push_to_hub and push the folder later (python publish.py)."
        )


def prepare_output_dir(training_args) -> str | None:
    """The checkpoint to resume from (None for a new run), the output folder checked first (a run is never overwritten
    by accident) and, with --overwrite_output_dir, cleared of the earlier run."""
    output_dir = Path(training_args.output_dir)
    resume = resolve_resume(training_args.resume_from_checkpoint, output_dir)
    if training_args.should_save:
        check_output_dir(output_dir, training_args.overwrite_output_dir, resume is not None)
        if training_args.overwrite_output_dir and resume is None:
            clear_previous_run(output_dir)
    return resume


def check_output_dir(output_dir: Path, overwrite: bool, resume: bool) -> None:
    """Refuse a folder that holds another run unless told to overwrite it or resume it (as transformers'
    run_translation.py does), and a folder that cannot be written, before any work."""
    if output_dir.is_dir() and any(output_dir.iterdir()) and not (overwrite or resume):
        raise SystemExit(
            f"error: --output_dir {output_dir} is not empty (an earlier run?). Pass --resume_from_checkpoint last to "
            "continue that run, --overwrite_output_dir to train a new one over it, or choose another folder."
        )
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        probe = output_dir / ".write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        raise SystemExit(f"error: --output_dir {output_dir} cannot be written: {error.strerror or error}.") from None


def clear_previous_run(output_dir: Path) -> None:
    """--overwrite_output_dir: remove the earlier run's checkpoints and tokenizer, which this run would otherwise
    rotate among its own checkpoints and reuse as its vocabulary. Its other files are replaced at the end."""
    for checkpoint in output_dir.glob("checkpoint-*"):
        shutil.rmtree(checkpoint)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (output_dir / name).unlink(missing_ok=True)


def resolve_resume(value: str | None, output_dir: str | Path) -> str | None:
    """`--resume_from_checkpoint last` (or true): the newest checkpoint in the output folder that loads; damaged ones
    (a file cut short, e.g. by a full disk) are passed over with a line saying so. Or the folder given."""
    if value is None or value.lower() in ("", "false", "no"):
        return None
    if value.lower() not in ("last", "true", "yes"):
        problem = "no such checkpoint folder" if not Path(value).is_dir() else damaged_checkpoint(value)
        if problem:
            raise SystemExit(
                f"error: --resume_from_checkpoint {value}: {problem}. Resume from another checkpoint "
                "(`last` passes over unusable ones), or train anew with --overwrite_output_dir."
            )
        return value
    # A checkpoint cut off while saving has no trainer_state.json: complete_checkpoints leaves it out.
    complete = complete_checkpoints(output_dir)
    for checkpoint in reversed(complete):
        problem = damaged_checkpoint(checkpoint)
        if not problem:
            return str(checkpoint)
        print(f"[resume] passing over {checkpoint}: {problem}")
    if complete:
        raise SystemExit(
            f"error: --resume_from_checkpoint {value}: none of the {len(complete)} complete checkpoint-* folders in "
            f"{output_dir} can be resumed from (see above). Train anew with --overwrite_output_dir."
        )
    raise SystemExit(f"error: --resume_from_checkpoint {value}: no complete checkpoint-* folder in {output_dir}.")


def without_resume_flag(argv: list[str]) -> list[str]:
    """The command that trains this model from scratch: a resumed run is the same run."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg.startswith("--resume_from_checkpoint"):
            skip = "=" not in arg
        else:
            kept.append(arg)
    return kept


def write_failure(error: BaseException, output_dir: Path) -> str | None:
    """One line for an error that means the output folder could not be written (full disk, file-size limit, no
    permission), naming the folder and what to do; None for any other error."""
    causes = []
    while error is not None and len(causes) < 10:  # torch.save's failure is raised while handling the first one
        causes.append(error)
        error = error.__cause__ or error.__context__
    numbered = [cause.errno for cause in causes if getattr(cause, "errno", None) in WRITE_ERRNOS]
    numbered += [number for cause in causes if (number := _rust_os_error(cause)) in WRITE_ERRNOS]
    # torch.save reports a failed write as a RuntimeError of its C++ stream, without an errno.
    stream = any(
        isinstance(cause, RuntimeError) and any(text in str(cause) for text in TORCH_WRITE_ERRORS) for cause in causes
    )
    if not (numbered or stream):
        return None
    what = "a file could not be written (a full disk, or a limit on file size)"
    if numbered:
        what = os.strerror(numbered[0])
    try:
        free = f" ({shutil.disk_usage(output_dir).free / 2**20:,.0f} MiB free there)"
    except OSError:
        free = ""
    return (
        f"error: writing to {output_dir} failed: {what}{free}. Free some space (or choose another --output_dir), "
        "then run the same command with --resume_from_checkpoint last to go on from the last sound checkpoint."
    )


def _rust_os_error(error: BaseException) -> int | None:
    """The OS error number in the text of an error raised by a Rust writer ("... (os error 28)"), or None."""
    if isinstance(error, OSError):
        return None  # Python's own carry it as errno
    match = RUST_OS_ERROR.search(str(error))
    return int(match.group(1) or match.group(2)) if match else None
