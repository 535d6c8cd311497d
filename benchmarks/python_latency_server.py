"""The Python side of the interleaved latency benchmark: holds models in Python eager mode and in the Python
lite interpreter, and runs them on request, so that every mode runs in a child process that
benchmarks/latency.py wakes the same way. The protocol of benchmarks/latency_protocol.py:

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

from benchmarks.eager_exports import eager_module  # noqa: E402  (importing it also registers the torchvision:: ops)
from benchmarks.latency_protocol import Loaded, serve  # noqa: E402


def build(mode: str, model_path: Path) -> Callable:
    if mode == "python_eager":
        return eager_module(model_path)
    if mode == "python_lite":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return _load_for_lite_interpreter(str(model_path))
    raise ValueError(f"unknown mode {mode!r} (python_eager or python_lite)")


def load(mode: str, model_path: Path, inputs_path: Path) -> Loaded:
    start = time.perf_counter()
    module = build(mode, model_path)
    load_ms = (time.perf_counter() - start) * 1e3
    inputs = list(torch.load(inputs_path))
    return Loaded(load_ms, lambda: module(*inputs), context=torch.inference_mode)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.python_latency_server", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads (default: torch's choice)")
    args = parser.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    serve(sys.stdin, load, "load KEY python_eager|python_lite MODEL.ptl INPUTS.pt, run KEY, quit")


if __name__ == "__main__":
    main()
