"""ExecuTorch + XNNPACK's side of the interleaved latency benchmark, run with the peers' python
(benchmarks/peers_env.py). The protocol of benchmarks/latency_protocol.py:

    load KEY executorch MODEL.ptl INPUTS.pt   -> "ok LOAD_MS"  (Program and Method loading, XNNPACK's weight
                                                                packing included; the registered model MODEL
                                                                is exported to a .pte first, untimed)
    load KEY executorch MODEL.pte INPUTS.pt   -> "ok LOAD_MS"  (a program exported beforehand, loaded as it is:
                                                                benchmarks/real_models.py's)
    run KEY                                   -> "ok MS"       (Method.execute on the same inputs)
    quit

The export is torch.export on the eager model the .ptl was made from, then ExecuTorch's
`to_edge_transform_and_lower` with the XNNPACK partitioner (what XNNPACK cannot take runs on ExecuTorch's
portable kernels), kept in `--pte-dir` by the .ptl's hash. It runs in ExecuTorch's Python runtime
(`executorch.runtime`), whose XNNPACK delegate shares ExecuTorch's thread pool: `--threads` resizes that pool.
The first run's outputs are checked against MODEL.expected.pt. A model torch.export cannot trace (the detection
post-processing: sizes that depend on values) is refused with the exporter's reason.
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings
from importlib.metadata import version
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402

from benchmarks.eager_exports import eager_module, example_tensors, is_prebuilt, peer_export, prebuilt_export  # noqa: E402
from benchmarks.latency_protocol import Loaded, output_discarded, serve  # noqa: E402

with output_discarded():  # torchao, which ExecuTorch imports, reports the CUDA kernels it cannot load
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner  # noqa: E402
    from executorch.exir import to_edge_transform_and_lower  # noqa: E402
    from executorch.extension.pybindings import portable_lib  # noqa: E402
    from executorch.runtime import Runtime  # noqa: E402

MODE = "executorch"
DEFAULT_PTE_DIR = REPO_ROOT / "build" / "bench" / "executorch"
# Changing how models are exported (partitioner, lowering) must change this, so cached files go stale.
EXPORT_VERSION = f"executorch-xnnpack-1 executorch {version('executorch')} torch {torch.__version__}"


def export_pte(model_path: Path, path: Path) -> None:
    model, inputs = eager_module(model_path), example_tensors(model_path)
    with warnings.catch_warnings(), output_discarded():
        warnings.simplefilter("ignore")
        exported = torch.export.export(model, inputs)
        program = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()]).to_executorch()
    path.write_bytes(program.buffer)


def set_threads(threads: int) -> int:
    """Resizes ExecuTorch's thread pool (XNNPACK's delegate runs on it; its default is one thread per core)
    and returns the size it then has."""
    if threads > 0:
        with output_discarded():  # it logs the reset
            portable_lib._unsafe_reset_threadpool(threads)
    return portable_lib._threadpool_get_thread_count()


def load(mode: str, model_path: Path, inputs_path: Path, pte_dir: Path) -> Loaded:
    if mode != MODE:
        raise ValueError(f"unknown mode {mode!r} ({MODE})")
    if is_prebuilt(model_path):
        export = prebuilt_export(model_path, inputs_path)
    else:
        export = peer_export(model_path, inputs_path, pte_dir, EXPORT_VERSION, ".pte",
                             lambda out: export_pte(model_path, out))
    runtime = Runtime.get()
    start = time.perf_counter()
    method = runtime.load_program(export.path).load_method("forward")
    load_ms = (time.perf_counter() - start) * 1e3
    return Loaded(load_ms, lambda: method.execute(export.inputs), check=lambda outputs: export.check(list(outputs)))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.executorch_latency_server", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=0,
                        help="ExecuTorch's thread pool size, which XNNPACK runs on (default: one per core)")
    parser.add_argument("--pte-dir", type=Path, default=DEFAULT_PTE_DIR,
                        help="where the exported programs are kept (default: %(default)s)")
    args = parser.parse_args()
    threads = set_threads(args.threads)
    if args.threads > 0 and threads != args.threads:
        sys.exit(f"executorch_latency_server: asked for {args.threads} thread(s), ExecuTorch's pool has {threads}")
    serve(sys.stdin, lambda mode, model, inputs: load(mode, model, inputs, args.pte_dir),
          f"load KEY {MODE} MODEL.ptl|MODEL.pte INPUTS.pt, run KEY, quit")


if __name__ == "__main__":
    main()
