"""transformers' own common model tests, from the source release of the installed version, fetched once and cached.

Every model inside transformers passes `ModelTesterMixin` (tests/test_modeling_common.py) and `ConfigTester`
(tests/test_configuration_common.py). They are not in the wheel, but the source release (sdist) on the package
registry holds them: `upstream_tests()` downloads it with pip once, keeps those two files in the user cache and
imports them from there, offline from then on. Nothing of them is copied into this project.

The release leaves out three sibling modules the two files import; we stand in for them (`STAND_INS`):
- `generation/test_utils.py`: `GenerationTesterMixin`, only in the source repository. An empty mixin here; the
  generate() contract is covered by tests/test_modeling.py.
- `exporters/test_export.py`: `ExportTesterMixin`, a base of `ModelTesterMixin`, also only in the repository. Empty.
- `utils/test_configuration_utils.py`: `config_common_kwargs`, values for the generic config fields that
  `ConfigTester.check_config_arguments_init` sets and reads back. Ours, a non-default value for each such field.
"""

import importlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import transformers

UPSTREAM_FILES = ("test_modeling_common.py", "test_configuration_common.py")
PACKAGE = "transformers_release_tests"  # the import name of the cached test files (never `tests`: that is ours)

STAND_INS = {
    "generation/test_utils.py": (
        '"""Stand-in: GenerationTesterMixin is only in the transformers repository, not in its release."""\n\n\n'
        "class GenerationTesterMixin:\n    pass\n"
    ),
    "exporters/test_export.py": (
        '"""Stand-in: ExportTesterMixin is only in the transformers repository, not in its release."""\n\n\n'
        "class ExportTesterMixin:\n    pass\n"
    ),
    "utils/test_configuration_utils.py": (
        '"""Stand-in: non-default values of generic config fields, which a config must keep as given."""\n\n'
        "config_common_kwargs = {\n"
        '    "return_dict": False,\n'
        '    "output_hidden_states": True,\n'
        '    "output_attentions": True,\n'
        '    "dtype": "float16",\n'
        '    "tie_word_embeddings": False,\n'
        '    "chunk_size_feed_forward": 5,\n'
        '    "architectures": ["SomeModel"],\n'
        '    "id2label": {0: "label"},\n'
        '    "label2id": {"label": 0},\n'
        '    "problem_type": "regression",\n'
        '    "bos_token_id": 6,\n'
        '    "pad_token_id": 7,\n'
        '    "eos_token_id": 8,\n'
        '    "decoder_start_token_id": 10,\n'
        "}\n"
    ),
}


def cache_dir() -> Path:
    """Where the test files of this transformers version are kept (TRANSFORMERS_RELEASE_TESTS overrides it)."""
    root = os.environ.get("TRANSFORMERS_RELEASE_TESTS")
    if root is None:
        root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "transformer-en-de" / "release-tests"
    return Path(root) / transformers.__version__


def _download_release(version: str, into: Path) -> Path:
    """The transformers sdist of `version`, downloaded with pip from the package registry."""
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:"]
    command += [f"transformers=={version}", "--dest", str(into)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    archives = sorted(into.glob("transformers-*.tar.gz"))
    if done.returncode or not archives:
        raise RuntimeError(f"`{' '.join(command)}` failed: {(done.stderr or done.stdout).strip()[-500:]}")
    return archives[0]


def _write_package(archive: Path, package: Path) -> None:
    """The two upstream files and our stand-ins, as an importable package (written whole, then renamed)."""
    staging = Path(tempfile.mkdtemp(dir=package.parent))
    with tarfile.open(archive) as release:
        for name in UPSTREAM_FILES:
            member = next((m for m in release.getmembers() if m.name.endswith(f"/tests/{name}")), None)
            if member is None:
                raise RuntimeError(f"{archive.name} has no tests/{name}.")
            (staging / name).write_bytes(release.extractfile(member).read())
    (staging / "__init__.py").write_text("")
    for relative, text in STAND_INS.items():
        path = staging / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        (path.parent / "__init__.py").write_text("")
        path.write_text(text)
    try:
        staging.rename(package)
    except OSError:  # another test process wrote it first: keep theirs
        shutil.rmtree(staging, ignore_errors=True)
        if not (package / UPSTREAM_FILES[-1]).is_file():
            raise


def upstream_tests():
    """(test_modeling_common, test_configuration_common) of the installed transformers, fetched on first use.

    Raises RuntimeError saying why when they cannot be had (no cached copy and no registry).
    """
    root = cache_dir()
    package = root / PACKAGE
    if not (package / UPSTREAM_FILES[-1]).is_file():
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as download:
            _write_package(_download_release(transformers.__version__, Path(download)), package)
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    return tuple(importlib.import_module(f"{PACKAGE}.{name[:-3]}") for name in UPSTREAM_FILES)
