"""Speed and quality benchmarks, run from the repository root: `python -m benchmarks.NAME [--quick]`.

Running a module of this package imports this file first, so these settings hold before transformers reads them.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never wait on the unreachable Hub (about 23 s of retries per file)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
