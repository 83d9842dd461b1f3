"""Every Python snippet of the README runs as a reader runs it: saved as a file, run from the repository root.

A block that needs what the tests do not have (the Hub, a running app) says so in the line before it:
`<!-- not run by the tests: REASON -->`.
"""

import os
import re
import subprocess
import sys

import pytest
from conftest import ROOT

README = ROOT / "README.md"
SKIP = re.compile(r"<!-- not run by the tests: (.+?) -->\s*$")


def python_blocks() -> list[tuple[int, str, str]]:
    """(line number, code, why it is skipped or "") of each ```python block."""
    lines = README.read_text(encoding="utf-8").splitlines()
    blocks = []
    for number, line in enumerate(lines):
        if line.strip() != "```python":
            continue
        end = lines.index("```", number + 1)
        marker = SKIP.search(lines[number - 1]) if number else None
        blocks.append((number + 1, "\n".join(lines[number + 1 : end]) + "\n", marker.group(1) if marker else ""))
    return blocks


BLOCKS = python_blocks()


def test_the_readme_has_python_blocks_and_most_run():
    assert len(BLOCKS) >= 3
    assert sum(not skipped for _, _, skipped in BLOCKS) >= 2


@pytest.mark.slow
@pytest.mark.parametrize(("line", "code", "skipped"), BLOCKS, ids=[f"README.md:{line}" for line, _, _ in BLOCKS])
def test_readme_python_block_runs_as_a_file_from_the_repository_root(line, code, skipped, tmp_path):
    if skipped:
        pytest.skip(f"README.md:{line}: {skipped}")
    script = tmp_path / "snippet.py"  # outside the checkout, as a reader's own file would be
    script.write_text(code, encoding="utf-8")
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**environment, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": environment.get("OMP_NUM_THREADS", "1")},
    )
    assert result.returncode == 0, f"README.md:{line} failed:\n{result.stderr[-3000:]}"
    assert result.stdout.strip(), f"README.md:{line} printed nothing"
