"""Installing the project puts nothing of it into site-packages: everything runs from the checkout."""

import subprocess
import sys
import zipfile

import pytest
from conftest import ROOT


@pytest.mark.slow
def test_wheel_holds_no_top_level_modules(tmp_path):
    # No build isolation: the installed setuptools builds it offline, as `pip install -e .` did for this environment.
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path)]
    subprocess.run([*command, str(ROOT)], check=True, capture_output=True)
    (wheel,) = tmp_path.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert names and all(".dist-info/" in name for name in names), names
