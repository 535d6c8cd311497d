"""Run the lightweight-dispatch benchmarks and write build/bench/report.{md,json} and bench.png.

    python -m benchmarks.run_benchmarks                 # everything (what ./build.sh bench runs)
    python -m benchmarks.run_benchmarks --only per-op   # one benchmark
    python -m benchmarks.run_benchmarks --copy-plot docs/bench.png

1. per-op:  instructions per op call (callgrind) on the micro models, static vs dynamic vs the kernel floor
   backend-cost: what choosing QuantizedCPU per call costs a float op: generated functions' instructions per
            call in this build (CPU;QuantizedCPU) against a CPU-only build of the micro models (build_cpu_only/)
2. latency: end-to-end medians, static vs dynamic vs Python eager vs Python lite vs the peers, ONNX Runtime and
            ExecuTorch + XNNPACK (in their own environment, build/peers_venv), interleaved, 1 and 2 threads;
            load and first inference
   bind-time: the bind-time stage run alone, each model in lite_predictor with and without --no-specialize
   real-models: issue 21's real models (torchvision classifiers, an int8 MobileNetV2, DistilBERT; exported in the
            peers' environment into build/real_models/), run by a predictor built for exactly their operators
            (build_real/), unfrozen and frozen, with and without the bind-time stage, against ONNX Runtime and
            ExecuTorch + XNNPACK, interleaved, 1 and 2 threads; load + first run
3. size:    object bytes and build time of the generated code, default selection vs --all-ops, and the
            predictor binary

Expects a built tree (./build.sh, or ./build.sh bench which builds first). Takes a few minutes; the
all-ops figures are reused from build_all/ unless --rebuild-all-ops (about 3 more minutes).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks import backend_cost, bind_time_alone, peers_env, per_op, report, size  # noqa: E402
from benchmarks.figures import Section, Target, from_json  # noqa: E402

BENCHMARKS = ("per-op", "backend-cost", "latency", "bind-time", "real-models", "size")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run_benchmarks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build-dir", type=Path, default=REPO_ROOT / "build", help="default: %(default)s")
    parser.add_argument("--build-all-dir", type=Path, default=REPO_ROOT / "build_all",
                        help="the --all-ops build to reuse or make (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: BUILD_DIR/bench)")
    parser.add_argument("--only", choices=BENCHMARKS, action="append",
                        help="run only this benchmark (repeatable); the report covers what ran")
    parser.add_argument("--rebuild-all-ops", action="store_true",
                        help="build the all-ops kernels afresh instead of reusing build_all/ (~3 minutes)")
    parser.add_argument("--cross-check", action="store_true",
                        help="also measure micro_add_loop on lite_predictor itself under callgrind (~2 minutes)")
    parser.add_argument("--no-peers", action="store_true",
                        help="latency: skip the peers, ONNX Runtime and ExecuTorch (otherwise installed into "
                             "build/peers_venv, apart from .venv)")
    parser.add_argument("--models", default=None,
                        help="latency: comma-separated models (default: benchmarks/latency.py's LATENCY_MODELS)")
    parser.add_argument("--real-models", default=None,
                        help="real-models: comma-separated (default: benchmarks/real_models_bench.py's MODEL_NAMES)")
    parser.add_argument("--threads", default="1,2",
                        help="latency, real-models: intra-op thread counts (default: %(default)s)")
    parser.add_argument("--runs", type=int, default=61,
                        help="latency, real-models: timed interleaved rounds (default: %(default)s; real-models caps "
                             "its slow models lower)")
    parser.add_argument("--warmup", type=int, default=5,
                        help="latency, real-models: untimed rounds first (default: %(default)s)")
    parser.add_argument("--cold-reps", type=int, default=3,
                        help="latency, real-models: fresh processes per mode for load and first inference "
                             "(default: %(default)s)")
    parser.add_argument("--omp-wait-policy", default="default", choices=("PASSIVE", "ACTIVE", "default"),
                        help="OMP_WAIT_POLICY for the latency processes (default: %(default)s, unset, as an app runs "
                             "LibTorch; PASSIVE puts OpenMP's workers to sleep after every parallel region, which "
                             "spares the other processes' turns but makes LibTorch's 2-thread runs 2-3x slower: "
                             "benchmarks/README.md). Only 2-thread runs have OpenMP workers.")
    parser.add_argument("--copy-plot", type=Path, default=None,
                        help="also copy the plot here (e.g. docs/bench.png, the README's picture)")
    return parser.parse_args(argv)


def git_commit() -> str:
    done = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(REPO_ROOT), "status", "--porcelain"], capture_output=True, text=True)
    commit = done.stdout.strip() or "unknown"
    return commit + (" (+ uncommitted changes)" if dirty.stdout.strip() else "")


def load_average() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def run_latency(args: argparse.Namespace, out: Path) -> Section:
    """In a child process, so the OpenMP wait policy is in its environment before torch loads."""
    env = dict(os.environ)
    if args.omp_wait_policy != "default":
        env["OMP_WAIT_POLICY"] = args.omp_wait_policy
    result = out / "latency.json"
    command = [
        sys.executable, "-m", "benchmarks.latency", "--json", str(result),
        "--server", str(args.build_dir / "benchmarks" / "bench_latency_server"),
        "--predictor", str(args.build_dir / "lite_predictor"), "--models-dir", str(args.build_dir / "models"),
        "--threads", args.threads, "--runs", str(args.runs), "--warmup", str(args.warmup),
        "--cold-reps", str(args.cold_reps),
    ]  # fmt: skip
    if args.models:
        command += ["--models", args.models]
    if not args.no_peers:
        try:
            command += ["--peers-python", str(peers_env.ensure_peers_python())]
        except peers_env.PeersEnvError as error:
            print(f"  peers: no ONNX Runtime or ExecuTorch this run: {error}", file=sys.stderr)
    subprocess.run(command, check=True, cwd=REPO_ROOT, env=env)
    return from_json(json.loads(result.read_text()))


def run_real_models(args: argparse.Namespace, out: Path) -> Section:
    """In a child process, as run_latency: the OpenMP wait policy is in its servers' environment."""
    env = dict(os.environ)
    if args.omp_wait_policy != "default":
        env["OMP_WAIT_POLICY"] = args.omp_wait_policy
    result = out / "real_models.json"
    command = [sys.executable, "-m", "benchmarks.real_models_bench", "--json", str(result), "--threads", args.threads,
               "--runs", str(args.runs), "--warmup", str(args.warmup), "--cold-reps", str(args.cold_reps)]
    if args.real_models:
        command += ["--models", args.real_models]
    reason = "--no-peers: the real models are exported and compared in the peers' environment" if args.no_peers else None
    if reason is None:
        try:
            command += ["--peers-python", str(peers_env.ensure_peers_python())]
        except peers_env.PeersEnvError as error:
            reason = f"the peers' environment could not be made (it exports the set and runs the peers): {error}"
    if reason is not None:
        print(f"  real models: skipped: {reason}", file=sys.stderr)
        return Section(skipped=[f"real models: {reason}"],
                       targets=[Target("real models: issue 21's targets", None, f"not run: {reason[:300]}")])
    subprocess.run(command, check=True, cwd=REPO_ROOT, env=env)
    return from_json(json.loads(result.read_text()))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = args.out or args.build_dir / "bench"
    out.mkdir(parents=True, exist_ok=True)
    chosen = args.only or list(BENCHMARKS)
    import torch

    environment = {
        "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "cpus": os.cpu_count(),
        "load_average_start": load_average(),
        "commit": git_commit(),
        "omp_wait_policy_latency": args.omp_wait_policy,
        "benchmarks": chosen,
    }
    sections: dict[str, Section] = {}
    timings: dict[str, float] = {}
    for name in chosen:
        start = time.perf_counter()
        print(f"==> {name}", file=sys.stderr)
        if name == "per-op":
            sections["per_op"] = per_op.measure(args.build_dir / "benchmarks" / "bench_per_op",
                                                args.build_dir / "models", out / "callgrind")
            if args.cross_check:
                per_op.cross_check(args.build_dir / "lite_predictor", args.build_dir / "models", out / "callgrind",
                                   sections["per_op"])
        elif name == "backend-cost":
            python = Path(sys.executable)
            cmake = python.parent / "cmake" if (python.parent / "cmake").exists() else Path("cmake")
            sections["backend_cost"] = backend_cost.measure(
                args.build_dir / "benchmarks" / "bench_per_op", args.build_dir / "models", REPO_ROOT / "build_cpu_only",
                out / "backend_cost", python, cmake)
        elif name == "latency":
            sections["latency"] = run_latency(args, out)
        elif name == "real-models":
            sections["real_models"] = run_real_models(args, out)
        elif name == "bind-time":
            sections["bind_time"] = bind_time_alone.measure(args.build_dir / "lite_predictor", args.build_dir / "models")
        else:
            sections["size"] = size.measure(args.build_dir, args.build_all_dir, args.rebuild_all_ops)
        timings[name] = round(time.perf_counter() - start, 1)
    environment["load_average_end"] = load_average()
    environment["seconds_per_benchmark"] = timings
    plot_path = out / "bench.png"
    report.write_json(out / "report.json", sections, environment)
    report.plot(plot_path, sections)
    report.write_markdown(out / "report.md", sections, environment, plot_path.name)
    if args.copy_plot:
        args.copy_plot.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(plot_path, args.copy_plot)
    print(f"wrote {out / 'report.md'}, {out / 'report.json'} and {plot_path}", file=sys.stderr)
    for target in (t for s in sections.values() for t in s.targets):
        verdict = {True: "met   ", False: "MISSED", None: "n/a   "}[target.met]
        print(f"  {verdict} {target.name}: {target.detail}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
