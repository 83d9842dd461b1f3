"""A CTranslate2 translator in a process of its own: what `backends.CTranslate2Backend` talks to by default.

CTranslate2 and PyTorch each bring an OpenMP runtime; in one process, once CTranslate2 has run, PyTorch's decoding
there is several times slower (`python -m benchmarks.engine_backends` measures it). This process imports nothing but
CTranslate2, so the two never share one. It is started as a script (`python ctranslate2_worker.py FOLDER ...`), never
as a module of the package, so that not even the package's imports come with it.

Protocol: requests are pickled onto stdin, one answer pickled onto stdout per request: ("translate", sources,
options) -> hypotheses (each the tokens of the best hypothesis); ("score", sources, targets) -> log-probabilities per
token; ("seed", n) -> None. An answer is (True, result) or (False, "one line of error"). EOF or None ends it.
The parent starts another worker if this one dies (`backends.CTranslate2Backend`).
"""

import os
import pickle
import signal
import sys


def serve(folder: str, compute_type: str, threads: int) -> None:
    protocol_in, protocol_out = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # anything printed must not land in the protocol
    import ctranslate2

    try:
        translator = ctranslate2.Translator(
            folder, device="cpu", compute_type=compute_type, intra_threads=threads, inter_threads=1
        )
    except Exception as error:  # the caller says why in one line
        pickle.dump((False, f"cannot load {folder}: {' '.join(str(error).split())}"), protocol_out)
        protocol_out.flush()
        return
    pickle.dump((True, "ready"), protocol_out)
    protocol_out.flush()
    while True:
        try:
            request = pickle.load(protocol_in)
        except EOFError:
            return
        if request is None:
            return
        try:
            kind, *arguments = request
            if kind == "translate":
                sources, options = arguments
                result = [item.hypotheses[0] for item in translator.translate_batch(sources, **options)]
            elif kind == "score":
                sources, targets = arguments
                result = [item.log_probs for item in translator.score_batch(sources, targets)]
            elif kind == "seed":
                ctranslate2.set_random_seed(arguments[0])
                result = None
            else:
                raise ValueError(f"unknown request {kind!r}")
            answer = (True, result)
        except Exception as error:  # the caller raises it in its own process, in one line
            answer = (False, f"{type(error).__name__}: {' '.join(str(error).split())}")
        pickle.dump(answer, protocol_out)
        protocol_out.flush()


if __name__ == "__main__":
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    # Ctrl-C in the server's terminal reaches the whole process group: the server decides when this process ends
    # (it closes stdin), and a KeyboardInterrupt here would only add a traceback to the log.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    serve(sys.argv[1], sys.argv[2], int(sys.argv[3]))
