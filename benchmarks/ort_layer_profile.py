"""ONNX Runtime's own profile of a model, per operator type: run in the peers' environment.

    build/peers_venv/bin/python -m benchmarks.ort_layer_profile --onnx M.onnx --inputs M.inputs.pt --runs 30

Creates a session with ORT's profiler on (1 intra-op thread, as the other runtime's profile), runs the model
--warmup times and then --runs times, and prints one JSON object: {"runs": N, "ms_per_run": {op_type: ms}},
summing each node's kernel time (ORT's "*_kernel_time" events) per operator type over the timed runs. The
operator types are ORT's after its graph optimisations (FusedConv, the NCHWc transformer's com.microsoft.nchwc
Conv and ReorderInput/ReorderOutput, ...), which is where ORT's time goes.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import onnxruntime
import torch


def profile(onnx_path: Path, inputs_path: Path, runs: int, warmup: int) -> dict:
    inputs = [t for t in torch.load(inputs_path) if isinstance(t, torch.Tensor)]
    with tempfile.TemporaryDirectory() as scratch:
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(scratch, "ort")
        session = onnxruntime.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
        feeds = {i.name: t.numpy() for i, t in zip(session.get_inputs(), inputs)}
        for _ in range(warmup):
            session.run(None, feeds)
        for _ in range(runs):
            session.run(None, feeds)
        events = json.loads(Path(session.end_profiling()).read_text())
    # Only the timed runs' events: the profile starts with the session's and the warm-up's.
    model_runs = [e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"]
    first_timed_us = model_runs[-runs]["ts"] if len(model_runs) >= runs else None
    per_type: dict[str, float] = defaultdict(float)
    for event in events:
        if event.get("cat") != "Node" or not event.get("name", "").endswith("_kernel_time"):
            continue
        if first_timed_us is not None and event["ts"] < first_timed_us:
            continue
        per_type[event["args"]["op_name"]] += event["dur"] / 1000.0
    return {"runs": runs, "ms_per_run": {op: ms / runs for op, ms in sorted(per_type.items())}}


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ort_layer_profile", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--onnx", type=Path, required=True)
    parser.add_argument("--inputs", type=Path, required=True, help="a torch.save'd list of the model's inputs")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()
    json.dump(profile(args.onnx, args.inputs, args.runs, args.warmup), sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
