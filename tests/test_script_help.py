"""Every command's --help: each flag listed once and with a help text, no help line stating a default beside the one
shown (so that the two cannot disagree), and no two flags with the same words."""

import re

import pytest

import average_checkpoints
import compare
import deploy_space
import publish
import train
import translate_corpus

SCRIPTS = {
    "train.py --help": (train.main, ["--help"]),
    "train.py --help-all": (train.main, ["--help-all"]),
    "compare.py": (compare.main, ["--help"]),
    "translate_corpus.py": (translate_corpus.main, ["--help"]),
    "average_checkpoints.py": (average_checkpoints.main, ["--help"]),
    "publish.py": (publish.main, ["--help"]),
    "deploy_space.py": (deploy_space.main, ["--help"]),
}
# An entry starts two spaces in (a flag, or a positional argument's name) and goes on on deeper-indented lines; the
# invocation ends at the first run of two spaces (or with the line).
ENTRY_START = re.compile(r"^  \S")


def help_text(name: str, capsys) -> str:
    main, argv = SCRIPTS[name]
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code in (0, None)
    return capsys.readouterr().out


def help_entries(text: str) -> list[tuple[str, str]]:
    """(invocation, help) of each argument listed after the first section heading."""
    lines = text.splitlines()
    first_section = next(index for index, line in enumerate(lines) if line in ("options:", "positional arguments:"))
    entries = []
    for line in lines[first_section:]:
        if ENTRY_START.match(line):
            invocation, _, rest = line.strip().partition("  ")
            entries.append([invocation, rest.strip()])
        elif line.startswith("   ") and entries:
            entries[-1][1] = f"{entries[-1][1]} {line.strip()}".strip()
    return [(invocation, " ".join(words.split())) for invocation, words in entries]


@pytest.mark.parametrize("name", SCRIPTS)
def test_each_flag_is_listed_once_with_one_true_default(name, capsys):
    entries = help_entries(help_text(name, capsys))
    assert len(entries) > 3
    seen = {}
    for invocation, words in entries:
        for flag in re.findall(r"(?<![\w-])--?[\w-]+", invocation) or [invocation.split()[0]]:
            assert flag not in seen, f"{flag} is listed twice: {seen[flag]!r} and {invocation!r}"
            seen[flag] = invocation
        assert words, f"{invocation} has no help"
        # The default shown at the end ("(default: X)", argparse's or the script's own) is the only one it states.
        shown = re.search(r"\(default: [^()]*(\([^()]*\)[^()]*)*\)$", words)
        if shown:
            assert "default" not in words[: shown.start()].lower(), f"{invocation} states two defaults: {words}"
    helps = [words for _, words in entries]
    repeated = {words for words in helps if helps.count(words) > 1}
    assert not repeated, f"several flags say the same: {repeated}"
