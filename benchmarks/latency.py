"""End-to-end latency: static vs dynamic dispatch vs Python eager vs the Python lite interpreter vs the peers
(ONNX Runtime, ExecuTorch + XNNPACK), interleaved.

Steady state: child processes per model and thread count, woken the same way (benchmarks/latency_protocol.py):
`bench_latency_server` holds the model under static and dynamic dispatch, `benchmarks.python_latency_server`
in Python eager mode and in the Python lite interpreter, and, with the peers' environment,
`benchmarks.ort_latency_server` and `benchmarks.executorch_latency_server` their exports of it; each times the
forward pass itself. Every round runs each mode once, in a freshly shuffled order, so drift in machine load
and any after-effects of one mode on the next fall on all modes alike. Medians over the rounds after warm-up;
static vs dynamic (and static vs ORT) is judged on the median of the per-round ratios (paired, so a round
slowed by other work on the machine slows both).

Cold start: load time and first inference in fresh processes (`lite_predictor --json` for static and
dynamic, `benchmarks.cold_start` for the others), the modes alternating, the median of a few repetitions.
"""
from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from benchmarks.figures import Section, Target
from test_models import MODELS

REPO_ROOT = Path(__file__).resolve().parent.parent
MODES = ("static", "static_plain", "dynamic", "python_eager", "python_lite", "onnxruntime", "executorch")
PEER_MODES = ("onnxruntime", "executorch")  # run by the peers' environment (benchmarks/peers_env.py)
# Issue #13's targets against ONNX Runtime (static's median per-round ratio to ORT's), by model and threads.
# The issue gives the detection heads' without a thread count: they are judged at both. It names one for "the
# larger head": judged on it with and without its post-processing.
ORT_TARGETS: dict[tuple[str, int], float] = {
    ("mobilenet_v2", 1): 1.0, ("mobilenet_v2", 2): 1.1,
    **{(model, threads): target for model, target in (
        ("ssdlite_head_convs", 1.5), ("ssdlite_head", 2.0), ("ssdlite_large_head_convs", 1.2),
        ("ssdlite_large_head", 1.2)) for threads in (1, 2)},
}  # fmt: skip
# Issue #13: lite_predictor's load + first run, fresh process, at most this x ORT's session creation + first run.
COLD_START_TARGETS: dict[str, float] = {"mobilenet_v2": 1.5}
# MobileNetV2, the SSDlite heads (the convolutional part alone and with post-processing) and the other
# detection heads; a model not (yet) in the registry is skipped and reported.
LATENCY_MODELS = ("mobilenet_v2", "quantized_mobilenet_v2", "ssdlite_head_convs", "ssdlite_head",
                  "ssdlite_large_head_convs", "ssdlite_large_head", "roi_head", "detection_ops")
TARGET_RATIO = 1.03  # static's median at most 3% above dynamic's
QUANTIZED_TARGET_RATIO = 1.0  # quantized models: static no slower than dynamic at all
SPECIALIZED_TARGET_RATIO = 1.03  # issue #13: the bind-time stage makes no model slower than plain static beyond noise
BURST_ROUNDS, BURST_LENGTH = 6, 5  # warm-cache figures: interleaved bursts of consecutive runs


class LatencyError(Exception):
    """A mode that cannot run a model, with the reason."""


class LatencyServer:
    """A child process that loads models and runs them on request, timing each run itself: the C++
    `bench_latency_server` (static, dynamic), `benchmarks.python_latency_server` (python_eager, python_lite) or
    a peer's server (onnxruntime, executorch).

    Each runs alone: before a server is asked anything, every other live server is stopped (SIGSTOP) and it is
    continued. Idle runtimes do not sit still: after a run, LibTorch's OpenMP workers spin for milliseconds and
    ORT's pool spins for far longer, and on this 2-core machine a spinning thread of one process takes a core from
    the next process's 2-thread run (MobileNetV3-Large, 2 threads, each run after an ORT run: static 24.4 ms, 4.5
    alone, 15.1 with 250 ms between runs; ORT after ours with OpenMP's workers spinning: 8.0 ms, 2.8 otherwise).
    A stopped process's threads do not run at all, so every runtime meets the machine as an app running only it
    would."""

    _live: list[LatencyServer] = []

    def __init__(self, command: list[str], threads: int) -> None:
        self._name = Path(command[-1]).name
        self._process = subprocess.Popen(
            [*command, "--threads", str(threads)], cwd=REPO_ROOT,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1,
        )  # fmt: skip
        self._stopped = False
        LatencyServer._live.append(self)

    def _signal(self, stop: bool) -> None:
        if self._stopped != stop and self._process.poll() is None:
            os.kill(self._process.pid, signal.SIGSTOP if stop else signal.SIGCONT)
            self._stopped = stop

    def _run_alone(self) -> None:
        for server in LatencyServer._live:
            if server is not self:
                server._signal(stop=True)
        self._signal(stop=False)

    def _ask(self, command: str) -> float:
        return float(self._reply(command))

    def _reply(self, command: str) -> str:
        """The text after "ok" of the server's reply to `command`; LatencyError for an error or a dead server."""
        assert self._process.stdin and self._process.stdout
        self._run_alone()
        try:
            self._process.stdin.write(command + "\n")
            self._process.stdin.flush()
            reply = self._process.stdout.readline().strip()
        except BrokenPipeError:  # it exited before this command
            reply = ""
        if not reply:
            raise LatencyError(f"{self._name} exited: {self._process.stderr.read()[-1000:]}")  # type: ignore[union-attr]
        status, _, value = reply.partition(" ")
        if status != "ok":
            raise LatencyError(value)
        return value

    def load(self, key: str, mode: str, model: Path, inputs: Path, atol: float | None = None) -> float:
        """Loads `model` under `key`; `atol` (bench_latency_server only): its first run's check's tolerance."""
        return self._ask(f"load {key} {mode} {model} {inputs}" + ("" if atol is None else f" {atol!r}"))

    def run(self, key: str) -> float:
        return self._ask(f"run {key}")

    def compiled_sites(self, key: str) -> tuple[int, int]:
        """bench_latency_server only: (compiled, ran): the bind-time stage's sites that ran, and of them those
        running their compiled kernel."""
        compiled, ran = self._reply(f"compiled {key}").split()
        return int(compiled), int(ran)

    def close(self) -> None:
        if self in LatencyServer._live:
            LatencyServer._live.remove(self)
        self._signal(stop=False)
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


def peer_server(peers_python: Path, mode: str) -> list[str]:
    """A peer's server (onnxruntime or executorch), run with the peers' environment (benchmarks/peers_env.py)."""
    return [str(peers_python), "-m", {"onnxruntime": "benchmarks.ort_latency_server",
                                      "executorch": "benchmarks.executorch_latency_server"}[mode]]


def server_for(mode: str) -> str:
    """Which server runs a mode: "cpp", "python", or the peer's own (named as the mode)."""
    return {"static": "cpp", "static_plain": "cpp", "dynamic": "cpp", "python_eager": "python",
            "python_lite": "python"}.get(mode, mode)


@dataclass
class Samples:
    load_ms: dict[str, float] = field(default_factory=dict)
    first_ms: dict[str, float] = field(default_factory=dict)
    rounds: list[dict[str, float]] = field(default_factory=list)  # per timed round: mode -> ms
    warm_burst_ms: dict[str, float] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    compiled_sites: dict[str, tuple[int, int]] = field(default_factory=dict)  # mode -> LatencyServer.compiled_sites, after the rounds

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


ADJACENT = (("static", "static_plain", "dynamic"),)



def round_order(modes: list[str], rng: random.Random,
                adjacent: tuple[tuple[str, ...], ...] = ADJACENT) -> list[str]:
    """A fresh random order, with each group of `adjacent` (by default static, static_plain and dynamic) kept
    together, in random order within it, so the runs the targets compare see the same machine conditions as
    nearly as possible."""
    units: list[list[str]] = []
    for group in adjacent:
        unit = [m for m in group if m in modes]
        rng.shuffle(unit)
        if unit:
            units.append(unit)
    grouped = {m for unit in units for m in unit}
    units += [[m] for m in modes if m not in grouped]
    rng.shuffle(units)
    return [m for unit in units for m in unit]


def interleaved(runners: dict[str, Callable[[], float]], samples: Samples, runs: int, warmup: int, seed: int,
                adjacent: tuple[tuple[str, ...], ...] = ADJACENT) -> None:
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
        for mode in round_order(modes, rng, adjacent):
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
        for mode in round_order(modes, rng, adjacent):
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
            for mode in PEER_MODES:
                servers[mode] = stack.enter_context(LatencyServer(peer_server(peers_python, mode), threads))
        runners = load_runners(name, models_dir, servers, samples)
        interleaved(runners, samples, runs, warmup, seed=threads)
    return samples


def cold_start_command(predictor: Path, name: str, models_dir: Path, mode: str, threads: int,
                       peers_python: Path | None) -> list[str]:
    """One fresh process that loads `name` in `mode`, runs it once and prints {"load_ms", "first_run_ms"}."""
    if mode in ("static", "static_plain", "dynamic"):
        dispatch = "dynamic" if mode == "dynamic" else "static"
        plain = ["--no-specialize"] if mode == "static_plain" else []
        return [str(predictor), str(models_dir / f"{name}.ptl"), "--dispatch", dispatch, "--iters", "1", "--warmup", "0",
                "--threads", str(threads), "--json", *plain]
    python = peers_python if mode in PEER_MODES else Path(sys.executable)
    return [str(python), "-m", "benchmarks.cold_start", name, "--mode", mode, "--models-dir", str(models_dir),
            "--threads", str(threads)]


def cold_start_sample(command: list[str]) -> tuple[float, float, float]:
    """load_ms, first_run_ms, and how long lite_predictor then waited for its background-prepared kernels (0 for
    the other modes, and without background preparation)."""
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO_ROOT)
    if done.returncode != 0:
        raise LatencyError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    waited = report.get("background_preparation", {}).get("waited_ms", 0.0)
    return report["load_ms"], report["first_run_ms"], waited


def cold_start(predictor: Path, name: str, models_dir: Path, reps: int, threads: int, section: Section,
               modes: tuple[str, ...] = MODES, peers_python: Path | None = None) -> None:
    """Load and first inference in fresh processes, `modes` alternating (the peers' only with their
    environment), medians of `reps`; judged against COLD_START_TARGETS."""
    modes = tuple(m for m in modes if m not in PEER_MODES or peers_python is not None)
    results: dict[str, list[tuple[float, float, float]]] = {mode: [] for mode in modes}
    failed: dict[str, str] = {}
    for _ in range(reps):
        for mode in modes:
            if mode in failed:
                continue
            try:
                results[mode].append(cold_start_sample(
                    cold_start_command(predictor, name, models_dir, mode, threads, peers_python)))
            except LatencyError as error:
                failed[mode] = str(error)
    for mode, reason in failed.items():
        section.skipped.append(f"cold start {name} {mode}: {reason}")
    for mode, values in results.items():
        if not values:
            continue
        note = f"fresh process, median of {len(values)}, {threads} thread(s)"
        if mode == "python_eager":
            note += "; 'load' is building the nn.Module in Python (random weights), not reading a file"
        elif mode == "onnxruntime":
            note += "; 'load' is session creation"
        elif mode == "executorch":
            note += "; 'load' is loading the program and its forward method (XNNPACK packs the weights)"
        prefix = f"latency/{name}/cold/{mode}"
        section.add(f"{prefix}/load_ms", round(statistics.median(v[0] for v in values), 2), "ms", note)
        section.add(f"{prefix}/first_inference_ms", round(statistics.median(v[1] for v in values), 2), "ms", note)
        section.add(f"{prefix}/load_plus_first_ms", round(statistics.median(v[0] + v[1] for v in values), 2), "ms",
                    note + "; median of the per-process sums")
        if mode == "static":
            section.add(f"{prefix}/kernels_ready_ms", round(statistics.median(sum(v) for v in values), 2), "ms",
                        note + "; load + first run + the wait for the kernels prepared in the background after it "
                        "(the first run has the generated kernels)")
    record_cold_ratio_to_ort(name, section, failed.get("onnxruntime"))


def record_cold_ratio_to_ort(name: str, section: Section, ort_failure: str | None = None) -> None:
    """Load + first run, fresh process: static / ONNX Runtime (session creation + first run), and ExecuTorch's
    the same way; static's judged against COLD_START_TARGETS where the issue set one."""
    prefix = f"latency/{name}/cold"
    target = COLD_START_TARGETS.get(name)
    label = f"start-up {name}: static load + first run <= {target} x ONNX Runtime's session creation + first run"
    ort = f"{prefix}/onnxruntime/load_plus_first_ms"
    if not section.has(ort):
        if target is not None:
            section.targets.append(Target(label, None, ort_failure or "ONNX Runtime's cold start was not measured"))
        return
    for mode in ("static", "executorch"):
        if section.has(f"{prefix}/{mode}/load_plus_first_ms"):
            section.add(f"{prefix}/{mode}_to_onnxruntime_load_plus_first",
                        round(section.get(f"{prefix}/{mode}/load_plus_first_ms") / section.get(ort), 3), "ratio",
                        f"{mode}'s load + first run / ONNX Runtime's, fresh processes")
    if target is not None:
        if not section.has(f"{prefix}/static_to_onnxruntime_load_plus_first"):
            section.targets.append(Target(label, None, "static's cold start was not measured: see skipped"))
            return
        ratio = section.get(f"{prefix}/static_to_onnxruntime_load_plus_first")
        ready = section.get(f"{prefix}/static/kernels_ready_ms") if section.has(f"{prefix}/static/kernels_ready_ms") else None
        section.targets.append(Target(label, ratio <= target, (
            f"{ratio:.3f}: static {section.get(f'{prefix}/static/load_plus_first_ms'):.1f} ms "
            f"({section.get(f'{prefix}/static/load_ms'):.1f} + {section.get(f'{prefix}/static/first_inference_ms'):.1f}), "
            f"ONNX Runtime {section.get(ort):.1f} ms ({section.get(f'{prefix}/onnxruntime/load_ms'):.1f} + "
            f"{section.get(f'{prefix}/onnxruntime/first_inference_ms'):.1f})"
            + (f"; static's compiled kernels ready {ready:.1f} ms after its load began" if ready is not None else ""))))


def target_ratio(name: str) -> float:
    """Float models: never slower beyond noise. Quantized ones call cheap int8 kernels, so the static path
    must be no slower at all (issue: quantized MobileNetV2's median per-round ratio <= 1.0)."""
    return QUANTIZED_TARGET_RATIO if MODELS[name].qengine is not None else TARGET_RATIO


def paired_ratio(rounds: list[dict[str, float]], numerator: str, denominator: str) -> tuple[float, float, float] | None:
    """The median per-round numerator / denominator over the rounds that ran both, and its bootstrap 95%
    interval; None when no round ran both."""
    both = [r for r in rounds if numerator in r and denominator in r]
    if not both:
        return None
    low, high = paired_ratio_interval(both, numerator=numerator, denominator=denominator)
    return statistics.median(r[numerator] / r[denominator] for r in both), low, high


def record_ratio_to_ort(name: str, threads: int, samples: Samples, section: Section) -> None:
    """static / ONNX Runtime and ExecuTorch / ONNX Runtime, per round, where both ran; static's judged against
    ORT_TARGETS where the issue set one."""
    prefix = f"latency/{name}/threads_{threads}"
    for mode in ("static", "executorch"):
        ratio = paired_ratio(samples.rounds, mode, "onnxruntime")
        if ratio is not None:
            section.add(f"{prefix}/{mode}_to_onnxruntime", round(ratio[0], 3), "ratio",
                        f"median over rounds of {mode} / ONNX Runtime in the same round")
            section.add(f"{prefix}/{mode}_to_onnxruntime_ci95", f"{ratio[1]:.3f}-{ratio[2]:.3f}", "ratio interval")
    target = ORT_TARGETS.get((name, threads))
    if target is None:
        return
    label = f"latency {name}, {threads} thread(s): static <= {target} x ONNX Runtime (median per-round ratio)"
    ratio = paired_ratio(samples.rounds, "static", "onnxruntime")
    if ratio is None:
        reason = samples.failed.get("onnxruntime") or samples.failed.get("static") or "ONNX Runtime did not run"
        section.targets.append(Target(label, None, reason))
    else:
        section.targets.append(Target(label, ratio[0] <= target,
                                      f"median per-round ratio {ratio[0]:.3f} (95% interval {ratio[1]:.3f}-{ratio[2]:.3f})"))


def record_modes(prefix: str, name: str, threads: int, modes: Sequence[str], samples: Samples, runs: int,
                 section: Section) -> None:
    """Each mode's median, minimum, first run, load and warm-burst median under `prefix`, and the raw rounds in
    the section's details (the latency section's and the real models' alike)."""
    for mode in modes:
        times = samples.steady_ms(mode)
        if len(times) < runs:
            continue
        section.add(f"{prefix}/{mode}/median_ms", round(statistics.median(times), 3), "ms",
                    f"median of {len(times)} interleaved runs after warm-up")
        section.add(f"{prefix}/{mode}/min_ms", round(min(times), 3), "ms")
        if mode in samples.first_ms:
            section.add(f"{prefix}/{mode}/first_inference_ms", round(samples.first_ms[mode], 3), "ms",
                        "first run after load, in the warm benchmark process")
        if mode in samples.load_ms:
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


def record_steady(name: str, threads: int, samples: Samples, runs: int, section: Section) -> None:
    prefix = f"latency/{name}/threads_{threads}"
    for mode, reason in samples.failed.items():
        section.skipped.append(f"latency {name} {threads} thread(s) {mode}: {reason}")
    record_modes(prefix, name, threads, MODES, samples, runs, section)
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
    else:
        section.targets.append(Target(f"latency {name}, {threads} thread(s): static <= {target_ratio(name)} x dynamic",
                                      None, "static or dynamic could not run: see skipped"))
    record_ratio_to_plain_static(name, threads, samples, section)
    record_ratio_to_ort(name, threads, samples, section)


def record_ratio_to_plain_static(name: str, threads: int, samples: Samples, section: Section) -> None:
    """static (with the bind-time stage) / static_plain (--no-specialize), per round: the stage's effect alone."""
    prefix = f"latency/{name}/threads_{threads}"
    label = (f"latency {name}, {threads} thread(s): static <= {SPECIALIZED_TARGET_RATIO} x static without the "
             "bind-time stage (median per-round ratio)")
    ratio = paired_ratio(samples.rounds, "static", "static_plain")
    if ratio is None:
        section.targets.append(Target(label, None, "static or static_plain could not run: see skipped"))
        return
    section.add(f"{prefix}/static_to_static_plain", round(ratio[0], 3), "ratio",
                "median over rounds of static / static without the bind-time stage in the same round")
    section.add(f"{prefix}/static_to_static_plain_ci95", f"{ratio[1]:.3f}-{ratio[2]:.3f}", "ratio interval")
    section.targets.append(Target(label, ratio[0] <= SPECIALIZED_TARGET_RATIO,
                                  f"median per-round ratio {ratio[0]:.3f} (95% interval {ratio[1]:.3f}-{ratio[2]:.3f})"))


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
        failed: set[str] = set()
        for count in threads:
            samples = steady_state(server_binary, name, models_dir, count, runs, warmup, peers_python)
            record_steady(name, count, samples, runs, section)
            failed |= set(samples.failed)
            medians = ", ".join(f"{m} {statistics.median(samples.steady_ms(m)):.2f}"
                                for m in MODES if samples.steady_ms(m))
            print(f"  latency {name} {count} thread(s): {medians} ms", file=sys.stderr)
        # A mode that could not run the model (its reason is under Skipped already) is not started again.
        cold_start(predictor, name, models_dir, cold_reps, 1, section,
                   tuple(m for m in MODES if m not in failed), peers_python)
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
                        help="the peers environment's python (benchmarks/peers_env.py), to run ONNX Runtime and "
                             "ExecuTorch too")
    args = parser.parse_args(argv)
    section = measure(args.server, args.predictor, args.models_dir, tuple(int(t) for t in args.threads.split(",")),
                      args.runs, args.warmup, args.cold_reps, tuple(args.models.split(",")), args.peers_python)
    args.json.write_text(json.dumps(as_json(section), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
