"""ONNX Runtime's side of the interleaved latency benchmark, run with the peers' python (benchmarks/peers_env.py).
The protocol of benchmarks/latency_protocol.py:

    load KEY onnxruntime MODEL.ptl INPUTS.pt   -> "ok LOAD_MS"  (session creation; the registered model MODEL
                                                                 is exported with torch.onnx first, untimed)
    load KEY onnxruntime MODEL.onnx INPUTS.pt  -> "ok LOAD_MS"  (a file exported beforehand, loaded as it is:
                                                                 benchmarks/real_models.py's; checked as
                                                                 eager_exports.prebuilt_export says)
    run KEY                                    -> "ok MS"       (InferenceSession.run on the same inputs)
    quit

The export is torch.onnx's TorchScript-based exporter (opset 17) on the eager model the .ptl was made from,
so ORT runs the same weights on the same inputs, kept in `--onnx-dir` by the .ptl's hash. `torchvision::nms`
is exported as ONNX NonMaxSuppression (this benchmark's own symbolic, `nms_symbolic`). The exporter traces:
sizes that depend on values (how many boxes pass the score threshold) are fixed by the example inputs, which
are the inputs every run uses. The first run's outputs are checked against MODEL.expected.pt.
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import onnxruntime  # noqa: E402
import torch  # noqa: E402
from torch.onnx import register_custom_op_symbolic, symbolic_helper  # noqa: E402

from benchmarks.eager_exports import eager_module, example_tensors, is_prebuilt, peer_export, prebuilt_export  # noqa: E402
from benchmarks.latency_protocol import Loaded, output_discarded, serve  # noqa: E402

OPSET = 17
MODE = "onnxruntime"
DEFAULT_ONNX_DIR = REPO_ROOT / "build" / "bench" / "onnx"
# Changing how models are exported (this file's symbolics, the opset) must change this, so cached files go stale.
EXPORT_VERSION = f"onnx-export-2 opset {OPSET} torch {torch.__version__} onnxruntime {onnxruntime.__version__}"


@symbolic_helper.parse_args("v", "v", "f")
def nms_symbolic(g, boxes, scores, iou_threshold: float):  # type: ignore[no-untyped-def]
    """torchvision::nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor as ONNX NonMaxSuppression.

    NonMaxSuppression takes boxes [batches, N, 4] and scores [batches, classes, N] and returns one row
    (batch, class, box) per kept box, in the order it keeps them: by descending score, as nms returns its
    indices. One batch and one class here, no score threshold and no cap on the count (torchvision's
    semantics), so the box column is nms's int64 result. Its corner order is [y1, x1, y2, x2]; IoU is the same
    with x and y swapped, so (x1, y1, x2, y2) boxes go in as they are."""
    axis0 = g.op("Constant", value_t=torch.tensor([0], dtype=torch.int64))
    batched_boxes = g.op("Unsqueeze", boxes, axis0)
    batched_scores = g.op("Unsqueeze", g.op("Unsqueeze", scores, axis0), axis0)
    no_cap = g.op("Constant", value_t=torch.tensor([sys.maxsize], dtype=torch.int64))
    threshold = g.op("Constant", value_t=torch.tensor([iou_threshold], dtype=torch.float32))
    selected = g.op("NonMaxSuppression", batched_boxes, batched_scores, no_cap, threshold)
    box_column = g.op("Gather", selected, g.op("Constant", value_t=torch.tensor([2], dtype=torch.int64)), axis_i=1)
    return g.op("Squeeze", box_column, g.op("Constant", value_t=torch.tensor([1], dtype=torch.int64)))


def export_onnx(model_path: Path, path: Path) -> None:
    register_custom_op_symbolic("torchvision::nms", nms_symbolic, 13)  # Unsqueeze and Squeeze take axes as inputs from 13
    model, inputs = eager_module(model_path), example_tensors(model_path)
    with warnings.catch_warnings(), output_discarded():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, inputs, str(path), dynamo=False, opset_version=OPSET)


def load(mode: str, model_path: Path, inputs_path: Path, threads: int, onnx_dir: Path) -> Loaded:
    if mode != MODE:
        raise ValueError(f"unknown mode {mode!r} ({MODE})")
    if is_prebuilt(model_path):
        export = prebuilt_export(model_path, inputs_path)
    else:
        export = peer_export(model_path, inputs_path, onnx_dir, EXPORT_VERSION, ".onnx",
                             lambda out: export_onnx(model_path, out))
    options = onnxruntime.SessionOptions()
    if threads > 0:
        options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    start = time.perf_counter()
    session = onnxruntime.InferenceSession(str(export.path), options, providers=["CPUExecutionProvider"])
    load_ms = (time.perf_counter() - start) * 1e3
    feeds = {i.name: t.numpy() for i, t in zip(session.get_inputs(), export.inputs)}
    return Loaded(load_ms, lambda: session.run(None, feeds),
                  check=lambda outputs: export.check([torch.from_numpy(o) for o in outputs]))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ort_latency_server", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=0, help="ORT's intra-op threads (default: its choice)")
    parser.add_argument("--onnx-dir", type=Path, default=DEFAULT_ONNX_DIR,
                        help="where the exported models are kept (default: %(default)s)")
    args = parser.parse_args()
    serve(sys.stdin, lambda mode, model, inputs: load(mode, model, inputs, args.threads, args.onnx_dir),
          f"load KEY {MODE} MODEL.ptl|MODEL.onnx INPUTS.pt, run KEY, quit")


if __name__ == "__main__":
    main()
