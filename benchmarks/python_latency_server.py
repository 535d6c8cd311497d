"""The Python side of the interleaved latency benchmark: holds models in Python eager mode and in the Python
lite interpreter, and runs them on request, so that all four modes run in child processes that
benchmarks/latency.py wakes the same way. Same protocol as bench_latency_server (latency_server.cpp):

    load KEY python_eager MODEL.ptl INPUTS.pt   -> "ok LOAD_MS"  (eager: builds the registered model MODEL)
    load KEY python_lite MODEL.ptl INPUTS.pt    -> "ok LOAD_MS"
    run KEY                                     -> "ok MS"       (the forward pass, in inference mode)
    quit
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path
from typing import Callable

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402
from torch.jit.mobile import _load_for_lite_interpreter  # noqa: E402

from test_models import get_model  # noqa: E402  (importing it also registers the torchvision:: ops)


def load(mode: str, model_path: Path) -> Callable:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if mode == "python_eager":
            spec = get_model(model_path.stem)
            if spec.qengine is not None:  # a quantized model runs (and is built) under its engine
                torch.backends.quantized.engine = spec.qengine
            return spec.build()
        if mode == "python_lite":
            return _load_for_lite_interpreter(str(model_path))
    raise ValueError(f"unknown mode {mode!r} (python_eager or python_lite)")


def serve(lines: object) -> None:
    loaded: dict[str, tuple[Callable, list[torch.Tensor]]] = {}
    for line in lines:  # type: ignore[attr-defined]
        words = line.split()
        if not words or words[0] == "quit":
            break
        try:
            if words[0] == "load" and len(words) == 5:
                start = time.perf_counter()
                module = load(words[2], Path(words[3]))
                reply = (time.perf_counter() - start) * 1e3
                loaded[words[1]] = (module, list(torch.load(words[4])))
            elif words[0] == "run" and len(words) == 2:
                module, inputs = loaded[words[1]]
                with torch.inference_mode():
                    start = time.perf_counter()
                    module(*inputs)
                    reply = (time.perf_counter() - start) * 1e3
            else:
                raise ValueError(f"bad command {line.strip()!r} (load KEY MODE MODEL.ptl INPUTS.pt, run KEY, quit)")
            print(f"ok {reply:.6f}", flush=True)
        except Exception as error:  # reported to the client, which records the mode as failed
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            print(f"error {type(error).__name__}: {first}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.python_latency_server", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads (default: torch's choice)")
    args = parser.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    serve(sys.stdin)


if __name__ == "__main__":
    main()
