"""ONNX Runtime's side of the interleaved latency benchmark, run with the peers' python (benchmarks/peers_env.py).
Same protocol as bench_latency_server (latency_server.cpp):

    load KEY onnxruntime MODEL.ptl INPUTS.pt   -> "ok LOAD_MS"  (session creation; the registered model MODEL
                                                                 is exported with torch.onnx first, untimed)
    run KEY                                    -> "ok MS"       (InferenceSession.run on the same inputs)
    quit

The export is torch.onnx's TorchScript-based exporter (opset 17) on the eager model the .ptl was made from,
so ORT runs the same weights on the same inputs; `--onnx-dir` keeps the .onnx files.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
import time
import warnings
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import onnxruntime  # noqa: E402
import torch  # noqa: E402

from test_models import get_model  # noqa: E402


def export(name: str, onnx_dir: Path) -> tuple[Path, list[torch.Tensor]]:
    spec = get_model(name)
    if spec.qengine is not None:
        torch.backends.quantized.engine = spec.qengine
    model, inputs = spec.build(), [t for t in spec.example_inputs() if isinstance(t, torch.Tensor)]
    path = onnx_dir / f"{name}.onnx"
    with warnings.catch_warnings(), exporter_output_discarded():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, tuple(inputs), str(path), dynamo=False, opset_version=17)
    return path, inputs


@contextlib.contextmanager
def exporter_output_discarded() -> Iterator[None]:
    """When it fails, the exporter prints the whole graph (hundreds of kB) on stdout, which is this server's
    protocol; and stderr is a pipe the benchmark reads only when the server dies, so a full one would block
    the server. The exception's message is what the benchmark reports."""
    sys.stdout.flush()
    saved = os.dup(1)
    with open(os.devnull, "w") as devnull:
        os.dup2(devnull.fileno(), 1)
        try:
            with contextlib.redirect_stdout(devnull), contextlib.redirect_stderr(devnull):
                yield
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)


def serve(lines: object, threads: int, onnx_dir: Path) -> None:
    sessions: dict[str, tuple[onnxruntime.InferenceSession, dict]] = {}
    for line in lines:  # type: ignore[attr-defined]
        words = line.split()
        if not words or words[0] == "quit":
            break
        try:
            if words[0] == "load" and len(words) == 5 and words[2] == "onnxruntime":
                path, _ = export(Path(words[3]).stem, onnx_dir)
                inputs = [t for t in torch.load(words[4]) if isinstance(t, torch.Tensor)]
                options = onnxruntime.SessionOptions()
                if threads > 0:
                    options.intra_op_num_threads = threads
                options.inter_op_num_threads = 1
                start = time.perf_counter()
                session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
                reply = (time.perf_counter() - start) * 1e3
                feeds = {i.name: t.numpy() for i, t in zip(session.get_inputs(), inputs)}
                sessions[words[1]] = (session, feeds)
            elif words[0] == "run" and len(words) == 2:
                session, feeds = sessions[words[1]]
                start = time.perf_counter()
                session.run(None, feeds)
                reply = (time.perf_counter() - start) * 1e3
            else:
                raise ValueError(f"bad command {line.strip()!r} (load KEY onnxruntime MODEL.ptl INPUTS.pt, run KEY, quit)")
            print(f"ok {reply:.6f}", flush=True)
        except Exception as error:  # reported to the client, which records the mode as failed
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            print(f"error {type(error).__name__}: {first[:300]}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ort_latency_server", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=0, help="ORT's intra-op threads (default: its choice)")
    parser.add_argument("--onnx-dir", type=Path, default=REPO_ROOT / "build" / "bench" / "onnx")
    args = parser.parse_args()
    args.onnx_dir.mkdir(parents=True, exist_ok=True)
    serve(sys.stdin, args.threads, args.onnx_dir)


if __name__ == "__main__":
    main()
