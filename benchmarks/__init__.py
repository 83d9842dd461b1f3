"""Speed and quality benchmarks, run from the repository root: `python -m benchmarks.NAME [--quick]`.

Running a module of this package imports this file first, before the module's own imports: so the Hugging Face
settings below hold for every benchmark, whatever it imports (transformers reads them at import).
"""

import os

# Never wait on the unreachable Hub (each call would retry for about 23 s per file).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
