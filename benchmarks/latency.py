"""End-to-end latency: static vs dynamic dispatch vs Python eager vs the Python lite interpreter, interleaved.

Steady state: two child processes per model and thread count, woken the same way: `bench_latency_server`
holds the model under static and dynamic dispatch, `benchmarks.python_latency_server` in Python eager mode
and in the Python lite interpreter; each times the forward pass itself. Every round runs each of the four
once, in a freshly shuffled order, so drift in machine load and any after-effects of one mode on the next
fall on all modes alike. Medians over the rounds after warm-up; static vs dynamic is judged on the median of
the per-round ratios (paired, so a round slowed by other work on the machine slows both).

Cold start: load time and first inference in fresh processes (`lite_predictor --json` for static and
dynamic, `benchmarks.python_cold_start` for Python), the modes alternating, the median of a few repetitions.
"""
from __future__ import annotations

import contextlib
import json
import random
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from benchmarks.figures import Section, Target
from test_models import MODELS

REPO_ROOT = Path(__file__).resolve().parent.parent
MODES = ("static", "dynamic", "python_eager", "python_lite", "onnxruntime")
# Issue #13's targets against ONNX Runtime (static's median per-round ratio to ORT's), by model and threads.
ORT_TARGETS: dict[tuple[str, int], float] = {("mobilenet_v2", 1): 1.0, ("mobilenet_v2", 2): 1.1}
# MobileNetV2 and the detection heads; a model not (yet) in the registry is skipped and reported.
LATENCY_MODELS = ("mobilenet_v2", "quantized_mobilenet_v2", "ssdlite_head", "roi_head", "detection_ops")
TARGET_RATIO = 1.03  # static's median at most 3% above dynamic's
QUANTIZED_TARGET_RATIO = 1.0  # quantized models: static no slower than dynamic at all
BURST_ROUNDS, BURST_LENGTH = 6, 5  # warm-cache figures: interleaved bursts of consecutive runs


class LatencyError(Exception):
    """A mode that cannot run a model, with the reason."""


class LatencyServer:
    """A child process that loads models and runs them on request, timing each run itself: the C++
    `bench_latency_server` (static, dynamic) or `benchmarks.python_latency_server` (python_eager, python_lite)."""

    def __init__(self, command: list[str], threads: int) -> None:
        self._process = subprocess.Popen(
            [*command, "--threads", str(threads)], cwd=REPO_ROOT,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1,
        )  # fmt: skip

    def _ask(self, command: str) -> float:
        assert self._process.stdin and self._process.stdout
        self._process.stdin.write(command + "\n")
        self._process.stdin.flush()
        reply = self._process.stdout.readline().strip()
        if not reply:
            raise LatencyError(f"bench_latency_server exited: {self._process.stderr.read()[-1000:]}")  # type: ignore[union-attr]
        status, _, value = reply.partition(" ")
        if status != "ok":
            raise LatencyError(value)
        return float(value)

    def load(self, key: str, mode: str, model: Path, inputs: Path) -> float:
        return self._ask(f"load {key} {mode} {model} {inputs}")

    def run(self, key: str) -> float:
        return self._ask(f"run {key}")

    def close(self) -> None:
        if self._process.poll() is None:
            assert self._process.stdin
            self._process.stdin.write("quit\n")
            self._process.stdin.flush()
            self._process.wait(timeout=30)

    def __enter__(self) -> LatencyServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


PYTHON_SERVER = [sys.executable, "-m", "benchmarks.python_latency_server"]


def ort_server(peers_python: Path) -> list[str]:
    """ONNX Runtime's server, run with the peers' environment (benchmarks/peers_env.py)."""
    return [str(peers_python), "-m", "benchmarks.ort_latency_server"]


def server_for(mode: str) -> str:
    return {"static": "cpp", "dynamic": "cpp", "onnxruntime": "ort"}.get(mode, "python")


@dataclass
class Samples:
    load_ms: dict[str, float] = field(default_factory=dict)
    first_ms: dict[str, float] = field(default_factory=dict)
    rounds: list[dict[str, float]] = field(default_factory=list)  # per timed round: mode -> ms
    warm_burst_ms: dict[str, float] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)

    def steady_ms(self, mode: str) -> list[float]:
        return [r[mode] for r in self.rounds if mode in r]


def load_runners(name: str, models_dir: Path, servers: dict[str, LatencyServer], samples: Samples) -> dict[str, Callable[[], float]]:
    """Every mode that can run `name`, loaded in its server; a mode that cannot is recorded in samples.failed."""
    model_path, inputs_path = models_dir / f"{name}.ptl", models_dir / f"{name}.inputs.pt"
    runners: dict[str, Callable[[], float]] = {}
    # One untimed load per process first: the first model a process loads pays one-time initialisation
    # (LibTorch's JIT operator registry, ~30M instructions), which would be charged to whichever mode loads first.
    for server, mode in ((servers["cpp"], "dynamic"), (servers["python"], "python_lite")):
        try:
            server.load("prime", mode, model_path, inputs_path)
        except LatencyError:
            pass  # the measured load below reports it
    for mode in MODES:
        if server_for(mode) not in servers:
            samples.failed[mode] = "no peers environment (run_benchmarks makes one unless --no-peers)"
            continue
        server = servers[server_for(mode)]
        try:
            samples.load_ms[mode] = server.load(mode, mode, model_path, inputs_path)
            runners[mode] = lambda key=mode, server=server: server.run(key)
        except LatencyError as error:
            samples.failed[mode] = str(error)
    return runners


def round_order(modes: list[str], rng: random.Random) -> list[str]:
    """A fresh random order, with static and dynamic adjacent (in random order) so the two runs the target
    compares see the same machine conditions as nearly as possible."""
    pair = [m for m in ("static", "dynamic") if m in modes]
    rng.shuffle(pair)
    units: list[list[str]] = [pair] if pair else []
    units += [[m] for m in modes if m not in pair]
    rng.shuffle(units)
    return [m for unit in units for m in unit]


def interleaved(runners: dict[str, Callable[[], float]], samples: Samples, runs: int, warmup: int, seed: int) -> None:
    rng = random.Random(seed)
    modes = list(runners)
    for mode in list(modes):  # the first inference of each, already loaded, in a warm process
        try:
            samples.first_ms[mode] = runners[mode]()
        except Exception as error:  # a model's own code may raise anything
            samples.failed[mode] = f"{type(error).__name__}: {str(error).splitlines()[0]}"
            modes.remove(mode)
    for round_index in range(warmup + runs):
        times: dict[str, float] = {}
        for mode in round_order(modes, rng):
            try:
                times[mode] = runners[mode]()
            except Exception as error:
                samples.failed[mode] = f"{type(error).__name__}: {str(error).splitlines()[0]}"
                modes.remove(mode)
        if round_index >= warmup:
            samples.rounds.append(times)
    for mode in samples.failed:  # a mode that failed part-way has no steady state
        for times in samples.rounds:
            times.pop(mode, None)
    # For scale: bursts of consecutive runs of one mode, caches warm with its own model (single interleaved
    # runs follow other processes' runs of the same model, which evict it). Bursts interleaved the same way;
    # each burst's first run is dropped.
    warm: dict[str, list[float]] = {mode: [] for mode in modes}
    for _ in range(BURST_ROUNDS):
        for mode in round_order(modes, rng):
            warm[mode] += [runners[mode]() for _ in range(BURST_LENGTH)][1:]
    samples.warm_burst_ms = {mode: statistics.median(times) for mode, times in warm.items()}


def paired_ratio_interval(rounds: list[dict[str, float]], seed: int = 0, resamples: int = 2000,
                          numerator: str = "static", denominator: str = "dynamic") -> tuple[float, float]:
    """A bootstrap 95% interval of the median per-round numerator/denominator ratio: how far noise moves it."""
    ratios = [r[numerator] / r[denominator] for r in rounds]
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(resamples))
    return medians[int(0.025 * resamples)], medians[int(0.975 * resamples) - 1]


def steady_state(server_binary: Path, name: str, models_dir: Path, threads: int, runs: int, warmup: int,
                 peers_python: Path | None = None) -> Samples:
    samples = Samples()
    with contextlib.ExitStack() as stack:
        servers = {
            "cpp": stack.enter_context(LatencyServer([str(server_binary)], threads)),
            "python": stack.enter_context(LatencyServer(PYTHON_SERVER, threads)),
        }
        if peers_python is not None:
            servers["ort"] = stack.enter_context(LatencyServer(ort_server(peers_python), threads))
        runners = load_runners(name, models_dir, servers, samples)
        interleaved(runners, samples, runs, warmup, seed=threads)
    return samples


def cold_start_cpp(predictor: Path, model: Path, mode: str, threads: int) -> tuple[float, float]:
    done = subprocess.run(
        [str(predictor), str(model), "--dispatch", mode, "--iters", "1", "--warmup", "0", "--threads", str(threads), "--json"],
        capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode != 0:
        raise LatencyError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}")
    report = json.loads(done.stdout)
    return report["load_ms"], report["first_run_ms"]


def cold_start_python(name: str, models_dir: Path, mode: str, threads: int) -> tuple[float, float]:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.python_cold_start", name, "--mode", mode.removeprefix("python_"),
         "--models-dir", str(models_dir), "--threads", str(threads)],
        capture_output=True, text=True, cwd=REPO_ROOT,
    )  # fmt: skip
    if done.returncode != 0:
        raise LatencyError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}")
    report = json.loads(done.stdout)
    return report["load_ms"], report["first_run_ms"]


def cold_start(predictor: Path, name: str, models_dir: Path, reps: int, threads: int, section: Section) -> None:
    model = models_dir / f"{name}.ptl"
    results: dict[str, list[tuple[float, float]]] = {mode: [] for mode in MODES}
    failed: dict[str, str] = {}
    for _ in range(reps):
        for mode in MODES:
            if mode in failed or mode == "onnxruntime":  # ORT's session creation is timed in the warm server
                continue
            try:
                if mode in ("static", "dynamic"):
                    results[mode].append(cold_start_cpp(predictor, model, mode, threads))
                else:
                    results[mode].append(cold_start_python(name, models_dir, mode, threads))
            except LatencyError as error:
                failed[mode] = str(error)
    for mode, reason in failed.items():
        section.skipped.append(f"cold start {name} {mode}: {reason}")
    for mode, values in results.items():
        if not values:
            continue
        load = statistics.median(v[0] for v in values)
        first = statistics.median(v[1] for v in values)
        note = f"fresh process, median of {len(values)}, {threads} thread(s)"
        if mode == "python_eager":
            note += "; 'load' is building the nn.Module in Python (random weights), not reading a file"
        section.add(f"latency/{name}/cold/{mode}/load_ms", round(load, 2), "ms", note)
        section.add(f"latency/{name}/cold/{mode}/first_inference_ms", round(first, 2), "ms", note)


def target_ratio(name: str) -> float:
    """Float models: never slower beyond noise. Quantized ones call cheap int8 kernels, so the static path
    must be no slower at all (issue: quantized MobileNetV2's median per-round ratio <= 1.0)."""
    return QUANTIZED_TARGET_RATIO if MODELS[name].qengine is not None else TARGET_RATIO


def record_ratio_to_ort(name: str, threads: int, samples: Samples, section: Section) -> None:
    """static / ONNX Runtime, per round, where ORT ran; judged against ORT_TARGETS where the issue set one."""
    rounds = [r for r in samples.rounds if "static" in r and "onnxruntime" in r]
    target = ORT_TARGETS.get((name, threads))
    if not rounds:
        if target is not None:
            section.targets.append(Target(f"latency {name}, {threads} thread(s): static <= {target} x ONNX Runtime",
                                          None, samples.failed.get("onnxruntime", "ONNX Runtime did not run")))
        return
    prefix = f"latency/{name}/threads_{threads}"
    paired = statistics.median(r["static"] / r["onnxruntime"] for r in rounds)
    low, high = paired_ratio_interval(rounds, numerator="static", denominator="onnxruntime")
    section.add(f"{prefix}/static_to_onnxruntime", round(paired, 3), "ratio",
                "median over rounds of static / ONNX Runtime in the same round")
    section.add(f"{prefix}/static_to_onnxruntime_ci95", f"{low:.3f}-{high:.3f}", "ratio interval")
    if target is not None:
        section.targets.append(Target(
            f"latency {name}, {threads} thread(s): static <= {target} x ONNX Runtime (median per-round ratio)",
            paired <= target, f"median per-round ratio {paired:.3f} (95% interval {low:.3f}-{high:.3f})"))


def record_steady(name: str, threads: int, samples: Samples, runs: int, section: Section) -> None:
    prefix = f"latency/{name}/threads_{threads}"
    for mode, reason in samples.failed.items():
        section.skipped.append(f"latency {name} {threads} thread(s) {mode}: {reason}")
    for mode in MODES:
        times = samples.steady_ms(mode)
        if len(times) < runs:
            continue
        section.add(f"{prefix}/{mode}/median_ms", round(statistics.median(times), 3), "ms",
                    f"median of {len(times)} interleaved runs after warm-up")
        section.add(f"{prefix}/{mode}/min_ms", round(min(times), 3), "ms")
        section.add(f"{prefix}/{mode}/first_inference_ms", round(samples.first_ms[mode], 3), "ms",
                    "first run after load, in the warm benchmark process")
        section.add(f"{prefix}/{mode}/load_ms", round(samples.load_ms[mode], 3), "ms",
                    "in the warm benchmark process" + (" (building the nn.Module)" if mode == "python_eager" else ""))
        if mode in samples.warm_burst_ms:
            section.add(f"{prefix}/{mode}/warm_burst_median_ms", round(samples.warm_burst_ms[mode], 3), "ms",
                        f"median of runs 2-{BURST_LENGTH} of {BURST_ROUNDS} interleaved bursts of {BURST_LENGTH} "
                        "consecutive runs (warm caches)")
    section.details.setdefault(name, {})[f"threads_{threads}"] = {
        "rounds_ms": [{m: round(t, 4) for m, t in r.items()} for r in samples.rounds],
        "failed": samples.failed,
    }
    if all(section.has(f"{prefix}/{m}/median_ms") for m in ("static", "dynamic")):
        of_medians = section.get(f"{prefix}/static/median_ms") / section.get(f"{prefix}/dynamic/median_ms")
        section.add(f"{prefix}/static_to_dynamic_of_medians", round(of_medians, 3), "ratio",
                    "median static / median dynamic")
        paired = statistics.median(r["static"] / r["dynamic"] for r in samples.rounds)
        low, high = paired_ratio_interval(samples.rounds)
        section.add(f"{prefix}/static_to_dynamic", round(paired, 3), "ratio",
                    "median over rounds of static / dynamic in the same round")
        section.add(f"{prefix}/static_to_dynamic_ci95", f"{low:.3f}-{high:.3f}", "ratio interval",
                    "bootstrap 95% interval of the median per-round ratio")
        target = target_ratio(name)
        section.targets.append(Target(
            f"latency {name}, {threads} thread(s): static <= {target} x dynamic (median per-round ratio)",
            paired <= target,
            f"median per-round ratio {paired:.3f} (95% interval {low:.3f}-{high:.3f}); ratio of medians {of_medians:.3f}",
        ))
        record_ratio_to_ort(name, threads, samples, section)
    else:
        section.targets.append(Target(f"latency {name}, {threads} thread(s): static <= {target_ratio(name)} x dynamic",
                                      None, "static or dynamic could not run: see skipped"))


def measure(server_binary: Path, predictor: Path, models_dir: Path, threads: tuple[int, ...] = (1, 2),
            runs: int = 61, warmup: int = 5, cold_reps: int = 3, models: tuple[str, ...] = LATENCY_MODELS,
            peers_python: Path | None = None) -> Section:
    section = Section()
    for name in models:
        if name not in MODELS:
            section.skipped.append(f"latency {name}: not in test_models/registry.py (yet)")
            continue
        if not (models_dir / f"{name}.ptl").is_file():
            section.skipped.append(f"latency {name}: {models_dir}/{name}.ptl missing (run scripts/dump_ops.py)")
            continue
        for count in threads:
            samples = steady_state(server_binary, name, models_dir, count, runs, warmup, peers_python)
            record_steady(name, count, samples, runs, section)
            medians = ", ".join(f"{m} {statistics.median(samples.steady_ms(m)):.2f}"
                                for m in MODES if samples.steady_ms(m))
            print(f"  latency {name} {count} thread(s): {medians} ms", file=sys.stderr)
        cold_start(predictor, name, models_dir, cold_reps, 1, section)
    return section


def main(argv: list[str] | None = None) -> int:
    """Run the latency benchmark alone and write its figures as JSON (run_benchmarks.py runs it this way, in
    a child process whose environment sets the OpenMP wait policy before torch loads)."""
    import argparse

    from benchmarks.figures import as_json

    parser = argparse.ArgumentParser(prog="python -m benchmarks.latency", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", type=Path, default=REPO_ROOT / "build" / "benchmarks" / "bench_latency_server")
    parser.add_argument("--predictor", type=Path, default=REPO_ROOT / "build" / "lite_predictor")
    parser.add_argument("--models-dir", type=Path, default=REPO_ROOT / "build" / "models")
    parser.add_argument("--threads", default="1,2", help="comma-separated intra-op thread counts (default: %(default)s)")
    parser.add_argument("--runs", type=int, default=61, help="timed interleaved rounds (default: %(default)s)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed rounds first (default: %(default)s)")
    parser.add_argument("--cold-reps", type=int, default=3, help="fresh processes per mode (default: %(default)s)")
    parser.add_argument("--models", default=",".join(LATENCY_MODELS), help="comma-separated (default: %(default)s)")
    parser.add_argument("--json", type=Path, required=True, help="where to write the figures")
    parser.add_argument("--peers-python", type=Path, default=None,
                        help="the peers environment's python (benchmarks/peers_env.py), to run ONNX Runtime too")
    args = parser.parse_args(argv)
    section = measure(args.server, args.predictor, args.models_dir, tuple(int(t) for t in args.threads.split(",")),
                      args.runs, args.warmup, args.cold_reps, tuple(args.models.split(",")), args.peers_python)
    args.json.write_text(json.dumps(as_json(section), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
