"""How train.py's flags are made from what they set, so that each is written once: a model flag per
`TransformerMTConfig` field (the config's documentation as its help), a Trainer flag with the recipe's default (the
Trainer's help), and the help output that shows each default: `--help` the project's flags, `--help-all` every one.
"""

import argparse
import copy
import dataclasses
import re
from dataclasses import field

from transformers import Seq2SeqTrainingArguments

from modeling import TransformerMTConfig

CONFIG_DEFAULTS = {config_field.name: config_field.default for config_field in dataclasses.fields(TransformerMTConfig)}
# The Args: section of the config's docstring: each entry `name (type, defaults to ...):` then its deeper lines.
_CONFIG_ENTRY = re.compile(r"^ {8}(\w+) \(.*\):\n((?: {12}.*\n)+)", re.MULTILINE)
_CONFIG_DOCS = dict(_CONFIG_ENTRY.findall(TransformerMTConfig.__doc__.split("Args:", 1)[1]))
_TRAINER_FIELDS = {trainer_field.name: trainer_field for trainer_field in dataclasses.fields(Seq2SeqTrainingArguments)}


def config_field(name: str):
    """A model flag: the config field `name`, its documentation as help; not given, it keeps the config's default
    (or, when fine-tuning, the trained model's value)."""
    doc = " ".join(_CONFIG_DOCS[name].split())
    return field(default=None, metadata={"help": f"{doc} (default: {CONFIG_DEFAULTS[name]!r})"})


# Documented config fields that are no architecture choice: the tokenizer decides the vocabulary and its special ids,
# generation the cache; the model is always an encoder-decoder.
NOT_MODEL_FLAGS = ("vocab_size", "pad_token_id", "decoder_start_token_id", "use_cache", "is_encoder_decoder")


def model_arguments() -> type:
    """train.py's model flags as a dataclass for `HfArgumentParser`: one per documented `TransformerMTConfig` field
    (`NOT_MODEL_FLAGS` left out), in the config's order, typed as the field and None when not given."""
    flags = [
        (config.name, config.type | None, config_field(config.name))
        for config in dataclasses.fields(TransformerMTConfig)
        if config.name in _CONFIG_DOCS and config.name not in NOT_MODEL_FLAGS
    ]
    doc = "The architecture and its regularisation: each flag sets the `TransformerMTConfig` field of the same name."
    return dataclasses.make_dataclass("ModelArguments", flags, namespace={"__doc__": doc})


def recipe(name: str, default, why: str = "", help: str | None = None):
    """A Trainer flag with the recipe's default instead of the Trainer's, and the Trainer's help (`why` added), or
    `help` in its place where the Trainer's would be untrue here (a default it names, a use train.py changes)."""
    if help is None:
        help = _TRAINER_FIELDS[name].metadata.get("help", "").strip()
        if help and not help.endswith("."):
            help += "."
        help = f"{help} {why}".strip()
    return field(default=default, metadata={"help": help})


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The description as written, and each flag's default, except a None one (its help says where it comes from);
    one spelling of each flag."""

    def __init__(self, prog, **kwargs):
        super().__init__(prog, **{"width": 120, "max_help_position": 40, **kwargs})  # as wide as the description

    def _get_help_string(self, action):
        """A `--no_FLAG` (HfArgumentParser's for a flag that defaults to true) says what it does, not FLAG's help
        again; a help that states its own default (or has none to state) is shown as written."""
        negation = action.const is False and action.option_strings[:1] == [f"--no_{action.dest}"]
        if negation:
            return f"Sets --{action.dest} to false."
        if action.default is None or "default" in (action.help or "").lower():
            return action.help
        return super()._get_help_string(action)

    def _format_action_invocation(self, action):
        """A flag under its underscore spelling only: the dashed one works too, and says nothing new."""
        spellings = {option.replace("-", "_") for option in action.option_strings}
        if len(action.option_strings) > 1 and len(spellings) == 1:
            action = copy.copy(action)
            action.option_strings = action.option_strings[:1]
        return super()._format_action_invocation(action)


class _FullHelp(argparse.Action):
    """--help-all: the help of every flag, the Trainer's included."""

    def __init__(self, option_strings, dest, hidden: dict | None = None, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)
        self.hidden = hidden or {}

    def __call__(self, parser, namespace, values, option_string=None):
        for action, help_text in self.hidden.items():
            action.help = help_text
        parser.print_help()
        parser.exit()


def brief_help(parser: argparse.ArgumentParser, shown: set[str]) -> None:
    """Make `--help` list only the flags whose names are in `shown` (and the help flags), and add `--help-all` for
    every flag, e.g. the full `Seq2SeqTrainingArguments` list."""
    hidden = {
        action: action.help
        for action in parser._actions
        if action.dest not in shown and action.dest != "help" and action.help != argparse.SUPPRESS
    }
    for action in hidden:
        action.help = argparse.SUPPRESS
    parser.add_argument(
        "--help-all",
        "--help_all",
        action=_FullHelp,
        hidden=hidden,
        help="Show every flag, the Trainer's (transformers' Seq2SeqTrainingArguments) included, and exit.",
    )
