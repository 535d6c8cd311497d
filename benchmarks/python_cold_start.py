"""Load time and first inference of one model in Python, in this (fresh) process: one sample of the cold start
that benchmarks/latency.py reports. Prints one JSON object: {"load_ms": ..., "first_run_ms": ...}.

    python -m benchmarks.python_cold_start mobilenet_v2 --mode lite --models-dir build/models
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402
from torch.jit.mobile import _load_for_lite_interpreter  # noqa: E402


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.python_cold_start", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="a registered test model (test_models/registry.py)")
    parser.add_argument("--mode", choices=("eager", "lite"), required=True,
                        help="eager: build the nn.Module and call it; lite: load MODEL.ptl in the lite interpreter")
    parser.add_argument("--models-dir", type=Path, default=REPO_ROOT / "build" / "models",
                        help="where dump_ops.py wrote MODEL.ptl and MODEL.inputs.pt (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads (default: %(default)s)")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    # As a Python user would import torchvision: the registry's import registers the torchvision:: ops the
    # detection models call. Not timed.
    from test_models import get_model

    inputs = list(torch.load(args.models_dir / f"{args.model}.inputs.pt"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        if args.mode == "eager":
            spec = get_model(args.model)
            if spec.qengine is not None:  # a quantized model runs (and is built) under its engine
                torch.backends.quantized.engine = spec.qengine
            module = spec.build()
        else:
            module = _load_for_lite_interpreter(str(args.models_dir / f"{args.model}.ptl"))
        load_ms = (time.perf_counter() - start) * 1e3
    with torch.inference_mode():
        start = time.perf_counter()
        module(*inputs)
        first_run_ms = (time.perf_counter() - start) * 1e3
    print(json.dumps({"load_ms": load_ms, "first_run_ms": first_run_ms}))


if __name__ == "__main__":
    main()
