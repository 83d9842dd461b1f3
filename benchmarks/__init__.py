"""Speed and quality benchmarks, run from the repository root: `python -m benchmarks.NAME [--quick]`."""

import os

# Before any benchmark imports transformers: never wait on the unreachable Hub (about 23 s of retries a file).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
