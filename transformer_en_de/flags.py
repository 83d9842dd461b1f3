"""How train.py's flags are made from what they set, so that each is written once: a model flag per
`TransformerMTConfig` field (the config's documentation as its help), a Trainer flag with the recipe's default (the
Trainer's help), and the help output that shows each default.
"""

import argparse
import dataclasses
from dataclasses import field

from transformers import Seq2SeqTrainingArguments
from transformers.utils.auto_docstring import parse_docstring

from modeling import TransformerMTConfig

CONFIG_DEFAULTS = {config_field.name: config_field.default for config_field in dataclasses.fields(TransformerMTConfig)}
_CONFIG_DOCS = parse_docstring(TransformerMTConfig.__doc__)[0]  # the Args: section, by transformers' own parser
_TRAINER_FIELDS = {trainer_field.name: trainer_field for trainer_field in dataclasses.fields(Seq2SeqTrainingArguments)}


def config_field(name: str):
    """A model flag: the config field `name`, its documentation as help; not given, it keeps the config's default
    (or, when fine-tuning, the trained model's value)."""
    doc = " ".join(_CONFIG_DOCS[name]["description"].split())
    return field(default=None, metadata={"help": f"{doc} (default: {CONFIG_DEFAULTS[name]!r})"})


def recipe(name: str, default, why: str = ""):
    """A Trainer flag with the recipe's default instead of the Trainer's, and the Trainer's help."""
    help_text = _TRAINER_FIELDS[name].metadata.get("help", "")
    return field(default=default, metadata={"help": f"{help_text} {why}".strip()})


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The description as written, and each flag's default, except a None one (its help says where it comes from)."""

    def _get_help_string(self, action):
        return action.help if action.default is None else super()._get_help_string(action)
