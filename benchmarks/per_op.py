"""Per-op overhead: instructions per operator call under static dispatch, dynamic dispatch and the kernel floor.

Each micro model (test_models/micro_*.py) runs in `bench_per_op` under `valgrind --tool=callgrind
--instr-atstart=no`: start-up, loading and warm-up run uninstrumented, then each mode runs K1 and K2
forward passes between client requests that zero and dump callgrind's counters. Per forward pass:
(I(K2) - I(K1)) / (K2 - K1); per op call: that over the model's op calls per forward pass. The floor is
the same kernel calls from C++ (benchmarks/kernel_floor.cpp). Callgrind's per-function counts, differenced
the same way, say where the instructions above the floor go.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import torch

from benchmarks.callgrind_profile import CallgrindDump, dumps_by_label, per_unit_self_cost, read_dump
from benchmarks.figures import Section, Target
from test_models import get_model, micro_add_loop, micro_op_chain, micro_postprocess

MODES = ("static", "static_stock", "dynamic", "floor")
ABOVE_FLOOR_MODES = ("static", "static_stock", "dynamic")
TARGET_RATIO = 0.5  # static's instructions above the floor at most half of dynamic's
TOP_FUNCTIONS = 25

# Coarse attribution of instructions above the floor, by function name (first match wins).
CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("lite_predictor's interpreter loop", ("lightweight_dispatch::BytecodeInterpreter",)),
    ("generated kernels and binding", ("lightweight_dispatch::",)),
    ("dispatcher and boxed wrappers", (
        "c10::Dispatcher", "OperatorHandle", "boxed", "Boxed", "makeOperatorFunction", "createOperatorFromC10",
        "KernelFunction", "DispatchKey", "getStepCallbacksUnlessEmpty",
    )),
    ("interpreter and RecordFunction", (
        "torch::jit::mobile::", "RecordFunction", "getStepCallbacks", "CallbackManager", "hasGlobalCallbacks",
        "anyEnabled", "ThreadLocalDebugInfo", "pthread_mutex", "__tls_get_addr", "torch::jit::pop",
        "torch::jit::listConstruct", "torch::jit::tupleConstruct",
    )),
    ("stack and IValue handling", ("std::vector<c10::IValue", "c10::IValue", "intrusive_ptr", "c10::List")),
    ("allocator", ("malloc", "free", "_int_", "operator new", "operator delete", "unlink_chunk", "memset")),
)


class PerOpError(Exception):
    """A micro model or measurement that is not what the benchmark assumes, with the reason."""


@dataclass(frozen=True)
class MicroModel:
    name: str
    loop_iterations: int
    ops_per_iteration: tuple[str, ...]

    @property
    def ops_per_forward(self) -> int:
        return self.loop_iterations * len(self.ops_per_iteration)


def micro_model(module: ModuleType) -> MicroModel:
    return MicroModel(module.__name__.rsplit(".", 1)[-1], module.LOOP_ITERATIONS, tuple(module.OPS_PER_ITERATION))


MICRO_MODELS: tuple[MicroModel, ...] = tuple(micro_model(m) for m in (micro_add_loop, micro_op_chain, micro_postprocess))


def loop_body_ops(model: MicroModel) -> list[str]:
    """The native ops of the scripted model's loop body, as the exported bytecode runs them."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph = torch.jit.script(get_model(model.name).build()).graph
    loops = [node for node in graph.nodes() if node.kind() == "prim::Loop"]
    if len(loops) != 1:
        raise PerOpError(f"{model.name}: expected one loop in forward, found {len(loops)}")
    body = next(iter(loops[0].blocks()))
    return [node.schema().split("(")[0] for node in body.nodes() if node.kind().startswith("aten::")]


def check_op_count(model: MicroModel) -> None:
    """OPS_PER_ITERATION is what the per-op arithmetic divides by: make sure the model still matches it."""
    actual = loop_body_ops(model)
    if actual != list(model.ops_per_iteration):
        raise PerOpError(
            f"{model.name}: OPS_PER_ITERATION no longer matches the scripted loop body; "
            f"update test_models/{model.name}.py and benchmarks/kernel_floor.cpp.\n"
            f"  declared: {list(model.ops_per_iteration)}\n  scripted: {actual}"
        )


@dataclass(frozen=True)
class CallgrindRun:
    model: MicroModel
    iters: tuple[int, int]
    dumps: dict[str, CallgrindDump]  # label "model|mode|K" -> dump
    checks: list[dict]  # per mode: outputs_match, max_abs_diff


def run_callgrind(bench_per_op: Path, model: MicroModel, models_dir: Path, out_dir: Path, iters: tuple[int, int]) -> CallgrindRun:
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("callgrind.out.*"):
        old.unlink()
    command = [
        "valgrind", "--tool=callgrind", "--instr-atstart=no",
        f"--callgrind-out-file={out_dir}/callgrind.out.%p",
        str(bench_per_op), model.name, "--models-dir", str(models_dir),
        "--iters", f"{iters[0]},{iters[1]}", "--warmup", "2",
    ]  # fmt: skip
    # One thread (bench_per_op also sets it): OpenMP workers spinning under callgrind would swamp the counts.
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if done.returncode != 0:
        raise PerOpError(f"{model.name}: bench_per_op failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if not result["under_valgrind"]:
        raise PerOpError(f"{model.name}: bench_per_op did not run under valgrind")
    failed = [c["mode"] for c in result["checks"] if not c["outputs_match"]]
    if failed:
        raise PerOpError(f"{model.name}: outputs differ from the expected ones in mode(s) {failed}: {result['checks']}")
    return CallgrindRun(model, iters, dumps_by_label(out_dir), result["checks"])


def category_of(function: str) -> str:
    for category, patterns in CATEGORIES:
        if any(p in function for p in patterns):
            return category
    return "other (kernels' own work differing from the floor)"


def by_category(costs: dict[str, float]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for function, cost in costs.items():
        category = category_of(function)
        totals[category] = totals.get(category, 0.0) + cost
    return {k: round(v, 1) for k, v in sorted(totals.items(), key=lambda kv: -kv[1])}


def top_functions(costs: dict[str, float], count: int = TOP_FUNCTIONS) -> list[tuple[str, float]]:
    ranked = sorted(costs.items(), key=lambda kv: -abs(kv[1]))
    return [(name, round(cost, 1)) for name, cost in ranked[:count] if abs(cost) >= 0.5]


def analyse(run: CallgrindRun, section: Section) -> None:
    model, (k1, k2) = run.model, run.iters
    prefix = f"per_op/{model.name}"
    ops = model.ops_per_forward
    section.add(f"{prefix}/ops_per_forward", ops, "op calls", f"{model.loop_iterations} x {len(model.ops_per_iteration)}")
    per_function: dict[str, dict[str, float]] = {}
    for mode in MODES:
        small, large = run.dumps[f"{model.name}|{mode}|{k1}"], run.dumps[f"{model.name}|{mode}|{k2}"]
        per_forward = (large.total - small.total) / (k2 - k1)
        section.add(f"{prefix}/{mode}/instructions_per_forward", round(per_forward), "instructions")
        section.add(f"{prefix}/{mode}/instructions_per_op", round(per_forward / ops, 1), "instructions/op call")
        per_function[mode] = per_unit_self_cost(small, large, (k2 - k1) * ops)
    floor = section.get(f"{prefix}/floor/instructions_per_op")
    above: dict[str, dict[str, float]] = {}
    for mode in ABOVE_FLOOR_MODES:
        value = round(section.get(f"{prefix}/{mode}/instructions_per_op") - floor, 1)
        section.add(f"{prefix}/{mode}/above_floor", value, "instructions/op call")
        names = set(per_function[mode]) | set(per_function["floor"])
        above[mode] = {n: per_function[mode].get(n, 0.0) - per_function["floor"].get(n, 0.0) for n in names}
    static_above, dynamic_above = (section.get(f"{prefix}/{m}/above_floor") for m in ("static", "dynamic"))
    ratio = static_above / dynamic_above if dynamic_above > 0 else float("nan")
    section.add(f"{prefix}/static_to_dynamic_above_floor", round(ratio, 3), "ratio")
    if dynamic_above > 0:
        section.add(f"{prefix}/static_stock_to_dynamic_above_floor",
                    round(section.get(f"{prefix}/static_stock/above_floor") / dynamic_above, 3), "ratio",
                    "generated kernels in the stock interpreter loop, against dynamic")
    section.targets.append(Target(
        f"per-op overhead {model.name}: static above floor <= {TARGET_RATIO} x dynamic's",
        ratio <= TARGET_RATIO,
        f"static {static_above:.0f}, dynamic {dynamic_above:.0f} instructions/op above a {floor:.0f} floor: "
        f"ratio {ratio:.2f}",
    ))
    section.details[model.name] = {
        "iters": [k1, k2],
        "ops_per_iteration": list(model.ops_per_iteration),
        "checks": run.checks,
        "above_floor_by_category": {mode: by_category(above[mode]) for mode in above},
        "top_functions_above_floor": {mode: top_functions(above[mode]) for mode in above},
        "top_functions_floor": top_functions(per_function["floor"]),
    }


def measure(bench_per_op: Path, models_dir: Path, work_dir: Path, iters: tuple[int, int] = (2, 5), jobs: int = 2) -> Section:
    """Run every micro model under callgrind (`jobs` at a time) and collect the per-op figures."""
    section = Section()
    if shutil.which("valgrind") is None:
        section.skipped.append("per-op overhead: valgrind is not installed (apt-get install valgrind)")
        return section
    runnable = []
    for model in MICRO_MODELS:
        if not (models_dir / f"{model.name}.ptl").is_file():
            section.skipped.append(f"per-op {model.name}: {models_dir}/{model.name}.ptl missing (run scripts/dump_ops.py)")
            continue
        check_op_count(model)
        runnable.append(model)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        runs = pool.map(lambda m: run_callgrind(bench_per_op, m, models_dir, work_dir / m.name, iters), runnable)
        for run in runs:
            analyse(run, section)
            print(f"  per-op {run.model.name}: static {section.get(f'per_op/{run.model.name}/static/above_floor'):.0f}, "
                  f"static_stock {section.get(f'per_op/{run.model.name}/static_stock/above_floor'):.0f}, dynamic {section.get(f'per_op/{run.model.name}/dynamic/above_floor'):.0f} above a "
                  f"{section.get(f'per_op/{run.model.name}/floor/instructions_per_op'):.0f} floor", file=sys.stderr)
    return section


def lite_predictor_per_op(predictor: Path, model: MicroModel, mode: str, models_dir: Path, out_dir: Path,
                          iters: tuple[int, int] = (1, 3)) -> float:
    """Instructions per op call measured on lite_predictor itself, whole program under callgrind, two
    --iters values differenced (start-up, ~1.1e9 instructions, cancels). Slow (~40 s a run): a cross-check."""
    out_dir.mkdir(parents=True, exist_ok=True)
    # Older lite_predictors ran the model in a forked child by default: kept in one process, or the parent's dump
    # (start-up only) would overwrite the child's.
    usage = subprocess.run([str(predictor), "--help"], capture_output=True, text=True).stdout
    in_process = ["--in-process"] if "--in-process" in usage else []
    totals = []
    for k in iters:
        out_file = out_dir / f"lite_predictor.{model.name}.{mode}.{k}.out"
        command = [
            "valgrind", "--tool=callgrind", f"--callgrind-out-file={out_file}",
            str(predictor), str(models_dir / f"{model.name}.ptl"),
            "--iters", str(k), "--warmup", "0", "--dispatch", mode, "--threads", "1", *in_process,
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
        if done.returncode != 0:
            raise PerOpError(f"lite_predictor {model.name} --dispatch {mode} failed: {done.stderr.strip()[-1000:]}")
        totals.append(read_dump(out_file).total)
    return (totals[1] - totals[0]) / (iters[1] - iters[0]) / model.ops_per_forward


def cross_check(predictor: Path, models_dir: Path, work_dir: Path, section: Section) -> None:
    """micro_add_loop's static and dynamic per-op counts measured on lite_predictor, beside bench_per_op's."""
    model = MICRO_MODELS[0]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = dict(zip(("static", "dynamic"), pool.map(
            lambda mode: lite_predictor_per_op(predictor, model, mode, models_dir, work_dir / "cross_check"),
            ("static", "dynamic"))))
    for mode, value in results.items():
        section.add(f"per_op/{model.name}/{mode}/lite_predictor_instructions_per_op", round(value, 1),
                    "instructions/op call", "lite_predictor under callgrind, --iters 1 and 3 differenced")
