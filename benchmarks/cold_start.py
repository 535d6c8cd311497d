"""Load time and first inference of one model in one of the Python-hosted modes, in this (fresh) process: one
sample of the cold start that benchmarks/latency.py reports. Prints one JSON object:
{"load_ms": ..., "first_run_ms": ...}.

    python -m benchmarks.cold_start mobilenet_v2 --mode python_lite --models-dir build/models
    build/peers_venv/bin/python -m benchmarks.cold_start mobilenet_v2 --mode onnxruntime   # the peers' python
    build/peers_venv/bin/python -m benchmarks.cold_start --file build/real_models/resnet18.onnx --mode onnxruntime

Each mode loads as its latency server does (the same `load`, timed the same way): Python eager builds the
nn.Module, the Python lite interpreter reads the .ptl, ONNX Runtime creates its session and ExecuTorch loads
its program and method, from the files their servers exported (exporting first, untimed, when missing).
Importing the runtime is not timed, as lite_predictor's load does not include LibTorch's start-up.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402

from benchmarks.latency_protocol import Loaded  # noqa: E402

MODES = ("python_eager", "python_lite", "onnxruntime", "executorch")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cold_start", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", nargs="?", help="a registered test model (test_models/registry.py)")
    parser.add_argument("--file", type=Path, default=None,
                        help="instead of a registered model: a file exported beforehand (MODEL.onnx for onnxruntime, "
                             "MODEL.pte for executorch: benchmarks/real_models.py's), fed MODEL.inputs.pt beside it")
    parser.add_argument("--mode", choices=MODES, required=True,
                        help="python_eager: build the nn.Module and call it; python_lite: load MODEL.ptl in the lite "
                             "interpreter; onnxruntime, executorch: the peers (run with the peers' python)")
    parser.add_argument("--models-dir", type=Path, default=REPO_ROOT / "build" / "models",
                        help="where dump_ops.py wrote MODEL.ptl and MODEL.inputs.pt (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads (default: %(default)s)")
    args = parser.parse_args()
    if (args.model is None) == (args.file is None):
        parser.error("give a registered model or --file, one of them")
    return args


def loader(mode: str, threads: int) -> Callable[[Path, Path], Loaded]:
    """The mode's server's `load`, its runtime imported (untimed) and its threads set."""
    if mode == "onnxruntime":
        from benchmarks import ort_latency_server as ort

        return lambda model, inputs: ort.load(mode, model, inputs, threads, ort.DEFAULT_ONNX_DIR)
    if mode == "executorch":
        from benchmarks import executorch_latency_server as executorch

        executorch.set_threads(threads)
        return lambda model, inputs: executorch.load(mode, model, inputs, executorch.DEFAULT_PTE_DIR)
    torch.set_num_threads(threads)
    # As a Python user would import torchvision: the registry's import registers the torchvision:: ops the
    # detection models call.
    from benchmarks import python_latency_server as python

    return lambda model, inputs: python.load(mode, model, inputs)


def main() -> None:
    args = parse_args()
    load = loader(args.mode, args.threads)
    if args.file is not None:
        loaded = load(args.file, args.file.with_name(args.file.stem + ".inputs.pt"))
    else:
        loaded = load(args.models_dir / f"{args.model}.ptl", args.models_dir / f"{args.model}.inputs.pt")
    with loaded.context():
        start = time.perf_counter()
        loaded.run()
        first_run_ms = (time.perf_counter() - start) * 1e3
    print(json.dumps({"load_ms": loaded.load_ms, "first_run_ms": first_run_ms}))


if __name__ == "__main__":
    main()
