"""The real-model benchmark (issue 21, item 5): benchmarks/real_models.py's set, run by a predictor built for
exactly its operators, beside ONNX Runtime and ExecuTorch + XNNPACK.

    python -m benchmarks.run_benchmarks --only real-models           # what ./build.sh bench runs as part of all
    python -m benchmarks.real_models_bench --json out.json --peers-python build/peers_venv/bin/python

1. Exports: real_models.py, run with the peers' python, writes build/real_models/ (unfrozen and frozen .ptl,
   inputs, expected outputs, .onnx, ORT's own int8 .onnx, .pte where ExecuTorch exports); reused while the
   stamp there (a hash of real_models.py, the peers' requirements and the quantization recipe) matches.
2. Build: build_real/, configured with -DSELECTED_MODELS=build/real_models/ (the models' operators and no
   others), targets lite_predictor and bench_latency_server; reconfigured when the exports were made anew.
3. Steady state: per model and thread count, one bench_latency_server (static and static_plain, each on the
   unfrozen and the frozen .ptl) and a server per peer loading the prebuilt .onnx / .pte; every round runs each
   mode once in a fresh random order (each model's stage / no-stage pair adjacent), medians after warm-up and
   median per-round ratios with bootstrap 95% intervals (benchmarks/latency.py's machinery).
4. Cold start: lite_predictor --json (unfrozen and frozen, stage on) against ORT's session creation and
   ExecuTorch's program load, each + first run, fresh processes, 1 thread, median of a few.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks.figures import Section, Target  # noqa: E402
from benchmarks import layer_profile  # noqa: E402
from benchmarks.latency import (LatencyError, LatencyServer, Samples, cold_start_sample, interleaved,  # noqa: E402
                                paired_ratio, peer_server, record_modes)

MODELS_DIR = REPO_ROOT / "build" / "real_models"
BUILD_DIR = REPO_ROOT / "build_real"
FROZEN_SUFFIX = "_frozen"  # real_models.FROZEN_SUFFIX (that module imports torch: not needed here)
# The set, in real_models.MODEL_NAMES' order (checked against it by the tests).
MODEL_NAMES = ("resnet18", "efficientnet_b0", "mobilenet_v3_large", "shufflenet_v2_x1_0", "regnet_x_400mf",
               "mobilenet_v2_int8", "distilbert")
# mode -> (bench_latency_server's mode, which .ptl): ours on the model as users save it and frozen, with the
# bind-time stage and without (--no-specialize).
OURS = {"static": ("static", ""), "static_plain": ("static_plain", ""),
        "static_frozen": ("static", FROZEN_SUFFIX), "static_plain_frozen": ("static_plain", FROZEN_SUFFIX)}
STAGE_MODES = ("static", "static_frozen")  # ours with the bind-time stage
# The quantized models also run with each quantized conv and linear on the engine fastest for it (--qengine auto,
# opt-in: its outputs may move by a quantization step at each call), checked within this many of the model's own
# tolerance (about one output step: real_models.py's atol).
INT8_MODELS = ("mobilenet_v2_int8",)
AUTO_ENGINES = {"static_auto": ("static_auto", "")}
AUTO_ENGINES_ATOL_STEPS = 2
PEERS = {"onnxruntime": ".onnx", "executorch": ".pte"}
MODES = (*OURS, *AUTO_ENGINES, *PEERS)
ADJACENT = (("static", "static_plain"), ("static_frozen", "static_plain_frozen"))
MODE_LABELS = {"static": "static", "static_plain": "static, no stage", "static_frozen": "frozen",
               "static_plain_frozen": "frozen, no stage", "static_auto": "static, --qengine auto",
               "onnxruntime": "ONNX Runtime", "executorch": "ExecuTorch"}
# Issue 21's targets.
PEER_TARGET = 1.0  # ours (unfrozen and frozen, stage on) / the best peer, median per-round ratio
FROZEN_TARGET = 1.03  # unfrozen / frozen (stage on)
STAGE_TARGET = 1.0  # stage / no stage (unfrozen and frozen)
COLD_TARGET = 1.5  # load + first run / the best peer's session creation (program load) + first run
# Slow models get fewer rounds (their rounds take ~10x a classifier's), so the section stays within minutes.
ROUNDS_CAP = {"distilbert": 21}
COLD_REPS_CAP = {"distilbert": 2}
# What the exported files depend on: a change to any of these exports the set anew.
EXPORT_INPUTS = ("benchmarks/real_models.py", "benchmarks/peers-requirements.txt", "test_models/quantization.py")
STAMP = ".export-stamp"


class RealModelsError(Exception):
    """The section cannot run (no peers environment, an export or the build failed), with the reason."""


# ------------------------------------------------------------------------------------------------ exporting

def export_key() -> str:
    digest = hashlib.sha256()
    for name in EXPORT_INPUTS:
        digest.update(name.encode() + b"\0" + (REPO_ROOT / name).read_bytes())
    return digest.hexdigest()


def exports_current(models_dir: Path) -> bool:
    stamp, manifest = models_dir / STAMP, models_dir / "manifest.json"
    if not stamp.is_file() or not manifest.is_file() or stamp.read_text().strip() != export_key():
        return False
    listed = json.loads(manifest.read_text()).get("models", {})
    return all(name in listed and (models_dir / f"{name}.ptl").is_file() for name in MODEL_NAMES)


def ensure_exports(peers_python: Path, models_dir: Path = MODELS_DIR) -> tuple[dict, bool]:
    """manifest.json of the exported set, and whether it was exported now (False: reused)."""
    if exports_current(models_dir):
        return json.loads((models_dir / "manifest.json").read_text()), False
    (models_dir / STAMP).unlink(missing_ok=True)  # an export killed part-way leaves no stamp behind
    print(f"  real models: exporting into {models_dir} (a few minutes)", file=sys.stderr, flush=True)
    done = subprocess.run([str(peers_python), "-m", "benchmarks.real_models", "--out", str(models_dir)],
                          capture_output=True, text=True, cwd=REPO_ROOT, timeout=1800)
    if done.returncode != 0:
        raise RealModelsError(f"benchmarks/real_models.py failed: {(done.stderr or done.stdout).strip()[-1500:]}")
    (models_dir / STAMP).write_text(export_key() + "\n")
    return json.loads((models_dir / "manifest.json").read_text()), True


# ------------------------------------------------------------------------------------------------ building

def ensure_build(models_dir: Path = MODELS_DIR, build_dir: Path = BUILD_DIR, reconfigure: bool = False) -> tuple[Path, Path]:
    """lite_predictor and bench_latency_server for exactly the models' operators, in build_dir (configured
    the first time, or again when the models were exported anew; Ninja rebuilds what changed)."""
    from benchmarks.size import tool

    python = REPO_ROOT / ".venv" / "bin" / "python"
    steps = []
    if reconfigure or not (build_dir / "build.ninja").is_file():
        steps.append([tool("cmake"), "-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={tool('ninja')}", "-S", str(REPO_ROOT),
                      "-B", str(build_dir), f"-DPython3_EXECUTABLE={python if python.exists() else sys.executable}",
                      "-DSTATIC_DISPATCH_BACKEND=CPU;QuantizedCPU", "-DUSE_LIGHTWEIGHT_DISPATCH=ON",
                      f"-DSELECTED_MODELS={models_dir}/"])
    steps.append([tool("cmake"), "--build", str(build_dir), "--target", "lite_predictor", "bench_latency_server"])
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True, cwd=REPO_ROOT)
        if done.returncode != 0:
            raise RealModelsError(f"building {build_dir.name}/ failed: {' '.join(step[:6])} ...\n"
                                  f"{(done.stdout + done.stderr)[-2500:]}")
    return build_dir / "lite_predictor", build_dir / "benchmarks" / "bench_latency_server"


# ------------------------------------------------------------------------------------------------ measuring

def peer_file(models_dir: Path, name: str, mode: str) -> Path:
    return models_dir / f"{name}{PEERS[mode]}"


def peer_missing_reason(manifest: dict, name: str, mode: str) -> str:
    kind = PEERS[mode].lstrip(".")
    reason = manifest.get("models", {}).get(name, {}).get("skipped", {}).get(kind)
    return f"not exported: {reason}" if reason else f"{name}{PEERS[mode]} not exported"


def steady_state(server_binary: Path, peers_python: Path, models_dir: Path, name: str, threads: int, runs: int,
                 warmup: int, manifest: dict) -> Samples:
    samples = Samples()
    with contextlib.ExitStack() as stack:
        cpp = stack.enter_context(LatencyServer([str(server_binary)], threads))
        runners: dict[str, Callable[[], float]] = {}
        ours = OURS | (AUTO_ENGINES if name in INT8_MODELS else {})
        for mode, (server_mode, suffix) in ours.items():
            stem = name + suffix
            atol = manifest["models"][name]["atol"] * AUTO_ENGINES_ATOL_STEPS if mode in AUTO_ENGINES else None
            try:
                samples.load_ms[mode] = cpp.load(mode, server_mode, models_dir / f"{stem}.ptl",
                                                 models_dir / f"{stem}.inputs.pt", atol)
                runners[mode] = lambda key=mode: cpp.run(key)
            except LatencyError as error:
                samples.failed[mode] = str(error)
        for mode in PEERS:
            path = peer_file(models_dir, name, mode)
            if not path.is_file():
                samples.failed[mode] = peer_missing_reason(manifest, name, mode)
                continue
            server = stack.enter_context(LatencyServer(peer_server(peers_python, mode), threads))
            try:
                samples.load_ms[mode] = server.load(mode, mode, path, models_dir / f"{name}.inputs.pt")
                runners[mode] = lambda key=mode, server=server: server.run(key)
            except LatencyError as error:
                samples.failed[mode] = str(error)
        interleaved(runners, samples, runs, warmup, seed=threads, adjacent=ADJACENT)
        for mode in (*STAGE_MODES, *AUTO_ENGINES):
            if mode in runners:
                samples.compiled_sites[mode] = cpp.compiled_sites(mode)
    return samples


def cold_command(predictor: Path, peers_python: Path, models_dir: Path, name: str, mode: str,
                 manifest: dict | None = None) -> list[str]:
    """One fresh process: load, one run, print {"load_ms", "first_run_ms"} (1 thread)."""
    if mode in AUTO_ENGINES:
        atol = (manifest or {}).get("models", {}).get(name, {}).get("atol", 1e-4) * AUTO_ENGINES_ATOL_STEPS
        return [str(predictor), str(models_dir / f"{name}.ptl"), "--iters", "1", "--warmup", "0", "--threads", "1",
                "--json", "--qengine", "auto", "--atol", str(atol)]
    if mode in OURS:
        server_mode, suffix = OURS[mode]
        plain = ["--no-specialize"] if server_mode == "static_plain" else []
        return [str(predictor), str(models_dir / f"{name}{suffix}.ptl"), "--iters", "1", "--warmup", "0",
                "--threads", "1", "--json", *plain]
    return [str(peers_python), "-m", "benchmarks.cold_start", "--file", str(peer_file(models_dir, name, mode)),
            "--mode", mode, "--threads", "1"]


COLD_MODES = ("static", "static_frozen", "onnxruntime", "executorch")


def cold_start(predictor: Path, peers_python: Path, models_dir: Path, name: str, reps: int,
               skip: dict[str, str], manifest: dict | None = None
               ) -> tuple[dict[str, list[tuple[float, float, float]]], dict[str, str]]:
    """Fresh-process samples per mode, modes alternating; modes in `skip` (those that could not run the model
    steadily, with their reason) are not started."""
    modes = (*COLD_MODES, *AUTO_ENGINES) if name in INT8_MODELS else COLD_MODES
    results: dict[str, list[tuple[float, float, float]]] = {m: [] for m in modes if m not in skip}
    failed: dict[str, str] = {}
    for _ in range(reps):
        for mode in results:
            if mode in failed:
                continue
            try:
                results[mode].append(cold_start_sample(
                    cold_command(predictor, peers_python, models_dir, name, mode, manifest)))
            except LatencyError as error:
                failed[mode] = str(error)
    return results, failed


# ------------------------------------------------------------------------------------------------ recording

def _judge(parts: list[tuple[str, float | None]], limit: float) -> tuple[bool | None, str]:
    """Several measurements judged as one target: missed when any is above `limit`; not judged when none
    missed but some were not measured."""
    measured = [(label, value) for label, value in parts if value is not None]
    detail = "; ".join(f"{label} {value:.3f}" if value is not None else f"{label} not measured" for label, value in parts)
    if any(value > limit for _, value in measured):
        return False, detail
    if len(measured) < len(parts) or not measured:
        return None, detail
    return True, detail


def best_peer(section: Section, prefix: str) -> str | None:
    """The faster peer (by median) at this model and thread count."""
    medians = {m: section.get(f"{prefix}/{m}/median_ms") for m in PEERS if section.has(f"{prefix}/{m}/median_ms")}
    return min(medians, key=medians.get) if medians else None


def _paired(section: Section, prefix: str, samples: Samples, numerator: str, denominator: str, figure: str,
            note: str) -> float | None:
    ratio = paired_ratio(samples.rounds, numerator, denominator)
    if ratio is None:
        return None
    section.add(f"{prefix}/{figure}", round(ratio[0], 3), "ratio", note)
    section.add(f"{prefix}/{figure}_ci95", f"{ratio[1]:.3f}-{ratio[2]:.3f}", "ratio interval",
                "bootstrap 95% interval of the median per-round ratio")
    return ratio[0]


def record_steady(name: str, threads: int, samples: Samples, runs: int, section: Section) -> None:
    """Medians per mode and the issue's per-round ratios: ours / the best peer (unfrozen and frozen),
    unfrozen / frozen and stage / no stage."""
    prefix = f"real_models/{name}/threads_{threads}"
    for mode, reason in samples.failed.items():
        section.skipped.append(f"real models {name} {threads} thread(s) {mode}: {reason}")
    section.add(f"{prefix}/rounds", runs, "rounds", "timed interleaved rounds after warm-up")
    record_modes(prefix, name, threads, MODES, samples, runs, section)
    peer = best_peer(section, prefix)
    if peer is not None:
        section.add(f"{prefix}/best_peer", peer, "mode", "the peer with the lower median")
        for mode in ("static", "static_frozen", *AUTO_ENGINES):
            _paired(section, prefix, samples, mode, peer, f"{mode}_to_best_peer",
                    f"median over rounds of {mode} / {peer} (the best peer) in the same round")
    for mode, (compiled, ran) in samples.compiled_sites.items():
        section.add(f"{prefix}/{mode}/stage_sites_ran", ran, "sites", "the bind-time stage's call sites that ran")
        section.add(f"{prefix}/{mode}/compiled_sites", compiled, "sites",
                    "of those, the sites whose calls ran the compiled kernel more often than the generated ones, after "
                    "the rounds (a site whose race the generated kernels won runs them on every call)")
    _paired(section, prefix, samples, "static_auto", "static", "static_auto_to_static",
            "median over rounds of --qengine auto / the loaded engine's packings (stage on both) in the same round")
    _paired(section, prefix, samples, "static", "static_frozen", "static_to_static_frozen",
            "median over rounds of unfrozen / frozen (stage on) in the same round")
    _paired(section, prefix, samples, "static", "static_plain", "static_to_static_plain",
            "unfrozen: median over rounds of the bind-time stage / --no-specialize in the same round")
    _paired(section, prefix, samples, "static_frozen", "static_plain_frozen", "static_frozen_to_static_plain_frozen",
            "frozen: median over rounds of the bind-time stage / --no-specialize in the same round")


def record_cold(name: str, results: dict[str, list[tuple[float, float, float]]], failed: dict[str, str],
                section: Section) -> None:
    prefix = f"real_models/{name}/cold"
    for mode, reason in failed.items():
        section.skipped.append(f"real models cold start {name} {mode}: {reason}")
    for mode, values in results.items():
        if not values or mode in failed:
            continue
        note = f"fresh process, median of {len(values)}, 1 thread"
        section.add(f"{prefix}/{mode}/load_ms", round(statistics.median(v[0] for v in values), 2), "ms", note)
        section.add(f"{prefix}/{mode}/first_inference_ms", round(statistics.median(v[1] for v in values), 2), "ms", note)
        section.add(f"{prefix}/{mode}/load_plus_first_ms", round(statistics.median(v[0] + v[1] for v in values), 2),
                    "ms", note + "; median of the per-process sums")
        if mode in OURS:
            section.add(f"{prefix}/{mode}/kernels_ready_ms", round(statistics.median(sum(v) for v in values), 2), "ms",
                        note + "; load + first run + the wait for the kernels the stage prepares in the background")
    peers = {m: section.get(f"{prefix}/{m}/load_plus_first_ms") for m in PEERS
             if section.has(f"{prefix}/{m}/load_plus_first_ms")}
    if not peers:
        return
    peer = min(peers, key=peers.get)
    section.add(f"{prefix}/best_peer", peer, "mode", "the peer with the lower load + first run")
    for mode in ("static", "static_frozen", *AUTO_ENGINES):
        if section.has(f"{prefix}/{mode}/load_plus_first_ms"):
            section.add(f"{prefix}/{mode}_to_best_peer_load_plus_first",
                        round(section.get(f"{prefix}/{mode}/load_plus_first_ms") / peers[peer], 3), "ratio",
                        f"load + first run / {peer}'s, medians of fresh processes")


def _get(section: Section, name: str) -> float | None:
    return section.get(name) if section.has(name) else None  # type: ignore[return-value]


def judge(name: str, threads: tuple[int, ...], section: Section) -> None:
    """Issue 21's targets for one model, each over the thread counts (and unfrozen and frozen)."""
    p = f"real_models/{name}"
    parts = [(f"{label} {t}t", _get(section, f"{p}/threads_{t}/{mode}_to_best_peer"))
             for t in threads for mode, label in (("static", "unfrozen"), ("static_frozen", "frozen"))]
    section.targets.append(Target(f"real {name}: ours <= {PEER_TARGET} x the best peer (median per-round ratio)",
                                  *_judge(parts, PEER_TARGET)))
    parts = [(f"{t}t", _get(section, f"{p}/threads_{t}/static_to_static_frozen")) for t in threads]
    section.targets.append(Target(f"real {name}: unfrozen <= {FROZEN_TARGET} x frozen", *_judge(parts, FROZEN_TARGET)))
    parts = [(f"{label} {t}t", _get(section, f"{p}/threads_{t}/{figure}")) for t in threads
             for figure, label in (("static_to_static_plain", "unfrozen"),
                                   ("static_frozen_to_static_plain_frozen", "frozen"))]
    section.targets.append(Target(f"real {name}: the bind-time stage <= {STAGE_TARGET} x no stage",
                                  *_judge(parts, STAGE_TARGET)))
    if name in INT8_MODELS:
        parts = [(f"{t}t", _get(section, f"{p}/threads_{t}/static_auto_to_best_peer")) for t in threads[:1]]
        section.targets.append(Target(f"real {name} with --qengine auto: <= {PEER_TARGET} x ORT's int8 model at "
                                      f"{threads[0]} thread(s)", *_judge(parts, PEER_TARGET)))
    parts = [(label, _get(section, f"{p}/cold/{mode}_to_best_peer_load_plus_first"))
             for mode, label in (("static", "unfrozen"), ("static_frozen", "frozen"))]
    section.targets.append(Target(f"real {name}: load + first run <= {COLD_TARGET} x the best peer's",
                                  *_judge(parts, COLD_TARGET)))


def record_manifest(manifest: dict, section: Section, exported_now: bool) -> None:
    """The peers' files' own checks (real_models.py's) and the int8 model's reference, for the report."""
    models = manifest.get("models", {})
    section.details["manifest"] = {
        "exported_now": exported_now, "versions": manifest.get("versions", {}),
        "checks": {name: models[name].get("checks", {}) for name in models},
        "peer_checks": {name: models[name]["peer_checks"] for name in models if models[name].get("peer_checks")},
        "skipped": {name: models[name].get("skipped", {}) for name in models},
    }


# ------------------------------------------------------------------------------------------------ the section

def measure(peers_python: Path | None, threads: tuple[int, ...] = (1, 2), runs: int = 61, warmup: int = 5,
            cold_reps: int = 3, models: tuple[str, ...] = MODEL_NAMES, models_dir: Path = MODELS_DIR,
            build_dir: Path = BUILD_DIR) -> Section:
    section = Section()
    try:
        if peers_python is None:
            raise RealModelsError("no peers environment (it exports the set and runs the peers): "
                                  "run without --no-peers")
        manifest, exported_now = ensure_exports(peers_python, models_dir)
        print(f"  real models: {'exported' if exported_now else 'reusing'} {models_dir}; building {build_dir.name}/",
              file=sys.stderr, flush=True)
        predictor, server = ensure_build(models_dir, build_dir, reconfigure=exported_now)
    except (RealModelsError, subprocess.TimeoutExpired) as error:
        section.skipped.append(f"real models: {error}")
        section.targets.append(Target("real models: issue 21's targets", None, f"not run: {str(error)[:300]}"))
        return section
    record_manifest(manifest, section, exported_now)
    for name in models:
        if not (models_dir / f"{name}.ptl").is_file():
            section.skipped.append(f"real models {name}: {models_dir}/{name}.ptl missing")
            continue
        model_runs = min(runs, ROUNDS_CAP.get(name, runs))
        failed: dict[str, str] = {}
        for count in threads:
            samples = steady_state(server, peers_python, models_dir, name, count, model_runs, warmup, manifest)
            record_steady(name, count, samples, model_runs, section)
            failed.update(samples.failed)
            medians = ", ".join(f"{m} {statistics.median(samples.steady_ms(m)):.2f}"
                                for m in MODES if samples.steady_ms(m))
            print(f"  real models {name} {count} thread(s), {model_runs} rounds: {medians} ms", file=sys.stderr,
                  flush=True)
        results, cold_failed = cold_start(predictor, peers_python, models_dir, name,
                                          min(cold_reps, COLD_REPS_CAP.get(name, cold_reps)), failed, manifest)
        record_cold(name, results, cold_failed, section)
        judge(name, threads, section)
        record_layers(predictor, peers_python, models_dir, name, section)
    return section


LAYER_PROFILE_RUNS = {"distilbert": 5}  # per model; others 20


def record_layers(predictor: Path, peers_python: Path, models_dir: Path, name: str, section: Section) -> None:
    """Where the time goes per kind of layer (layer_profile.py): ours (the model as saved, stage on) beside ORT's
    own profile, 1 thread, into details["layer_profile"][name]."""
    onnx = peer_file(models_dir, name, "onnxruntime")
    if not onnx.is_file():
        return
    runs = LAYER_PROFILE_RUNS.get(name, 20)
    inputs = models_dir / f"{name}.inputs.pt"
    model = models_dir / f"{name}.ptl"
    try:
        stage = layer_profile.profile_ops(predictor, model, inputs, runs)
        no_stage = layer_profile.profile_ops(predictor, model, inputs, runs, "--no-specialize")
        profiles = {"static": layer_profile.by_kind(stage, layer_profile._OURS),
                    "onnxruntime": layer_profile.onnxruntime(peers_python, onnx, inputs, runs)}
    except (RuntimeError, subprocess.TimeoutExpired, ValueError, KeyError) as error:
        section.skipped.append(f"real models {name}: no per-layer profile: {error}")
        return
    section.details.setdefault("layer_profile", {})[name] = profiles
    slower = layer_profile.slower_outside_partitions(stage, no_stage)
    section.details.setdefault("slower_outside_partitions", {})[name] = slower
    listed = ", ".join(f"{op} {a:.3f} vs {b:.3f} ms/run" for op, (a, b) in slower.items())
    section.targets.append(Target(
        f"real models {name}: no operator outside a partition slower with the stage than without (item 3)",
        not slower, listed or f"none beyond {layer_profile.SLOWER_RATIO}x and {layer_profile.SLOWER_MS} ms/run "
                              "(--profile-ops, stage vs --no-specialize, 1 thread)"))


def main(argv: list[str] | None = None) -> int:
    """Run the section alone and write its figures as JSON (run_benchmarks.py runs it this way, in a child
    process whose environment sets the OpenMP wait policy)."""
    import argparse

    from benchmarks.figures import as_json

    parser = argparse.ArgumentParser(prog="python -m benchmarks.real_models_bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path, required=True, help="where to write the figures")
    parser.add_argument("--peers-python", type=Path, default=None, help="the peers environment's python")
    parser.add_argument("--threads", default="1,2", help="comma-separated intra-op thread counts (default: %(default)s)")
    parser.add_argument("--runs", type=int, default=61, help="timed interleaved rounds (default: %(default)s; "
                        f"capped per model: {ROUNDS_CAP})")
    parser.add_argument("--warmup", type=int, default=5, help="untimed rounds first (default: %(default)s)")
    parser.add_argument("--cold-reps", type=int, default=3, help="fresh processes per mode (default: %(default)s)")
    parser.add_argument("--models", default=",".join(MODEL_NAMES), help="comma-separated (default: %(default)s)")
    args = parser.parse_args(argv)
    unknown = [m for m in args.models.split(",") if m not in MODEL_NAMES]
    if unknown:
        parser.error(f"unknown real model(s) {', '.join(unknown)}; known: {', '.join(MODEL_NAMES)}")
    section = measure(args.peers_python, tuple(int(t) for t in args.threads.split(",")), args.runs, args.warmup,
                      args.cold_reps, tuple(args.models.split(",")))
    args.json.write_text(json.dumps(as_json(section), indent=1))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
