"""The formatter owns the layout: the code is as `ruff format` writes it and passes `ruff check`, with `# fmt: skip`
kept for tables of data that read better aligned (at most ten in the repository)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

FMT_SKIP_ALLOWED = 10


def ruff(*arguments: str) -> subprocess.CompletedProcess:
    executable = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if executable is None:
        pytest.skip("ruff is not installed (the dev extra has it)")
    return subprocess.run([executable, *arguments], cwd=ROOT, capture_output=True, text=True, check=False)


def test_the_code_is_as_the_formatter_writes_it():
    result = ruff("format", "--check", ".")
    assert result.returncode == 0, f"run `ruff format .`:\n{result.stdout}{result.stderr}"


def test_the_linter_finds_nothing():
    result = ruff("check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_fmt_skip_is_kept_for_tables_only():
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True)
    skips = [
        f"{name}:{number}"
        for name in tracked.stdout.split()
        if (ROOT / name).is_file()
        for number, line in enumerate((ROOT / name).read_text(encoding="utf-8").splitlines(), 1)
        if line.rstrip().endswith("# fmt: skip")
    ]
    assert len(skips) <= FMT_SKIP_ALLOWED, skips
