"""What the per-call backend choice costs a float op (STATIC_DISPATCH_BACKEND=CPU;QuantizedCPU vs CPU).

With QuantizedCPU among the backends, a native op that has a QuantizedCPU kernel checks its tensor arguments
on every call (`self.is_quantized()`; `holds_quantized_tensor(...)` for lists and optionals) before calling
its CPU kernel. This benchmark builds the micro models' operators a second time with CPU alone
(`build_cpu_only/`), runs both `bench_per_op` binaries under callgrind, and reports, per operator of the micro
models, the generated function's own instructions per call (with the out-of-line list check it calls) in
each build. Whole-model instructions per op call are reported too, but they move by a few tens of instructions
between any two binaries with different code layout (the kernel floor itself does), so the per-function
difference is the measurement.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from benchmarks.callgrind_profile import per_unit_self_cost
from benchmarks.figures import Section
from benchmarks.per_op import MICRO_MODELS, CallgrindRun, MicroModel, PerOpError, run_callgrind
from tools.cpp_types import quantized_check
from tools.native_ops import load_native_catalog

REPO_ROOT = Path(__file__).resolve().parent.parent
CHECK_HELPER = "lightweight_dispatch::generated::holds_quantized_tensor"
_GENERATED = re.compile(r"^lightweight_dispatch::generated::([A-Za-z0-9_]+)\(")


def unboxing_function_of(op_name: str) -> str:
    """aten::mul.Tensor -> aten_mul_Tensor, as tools/emit_unboxing.py names it."""
    return re.sub(r"[^A-Za-z0-9_]", "_", op_name.replace("::", "_"))


def build_cpu_only(python: Path, cmake: Path, build_dir: Path) -> Path:
    """Configure and build bench_per_op for the micro models' operators with STATIC_DISPATCH_BACKEND=CPU."""
    ops_yaml = build_dir / "micro_ops.yaml"
    build_dir.mkdir(parents=True, exist_ok=True)
    names = [m.name for m in MICRO_MODELS]
    steps = [
        [str(python), str(REPO_ROOT / "scripts" / "dump_ops.py"), *names, "--output", str(ops_yaml),
         "--models-dir", str(build_dir / "models")],
        [str(cmake), "-G", "Ninja", "-S", str(REPO_ROOT), "-B", str(build_dir), f"-DPython3_EXECUTABLE={python}",
         "-DSTATIC_DISPATCH_BACKEND=CPU", f"-DSELECTED_OP_LIST={ops_yaml}"],
        [str(cmake), "--build", str(build_dir), "--target", "bench_per_op"],
    ]  # fmt: skip
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True)
        if done.returncode != 0:
            raise PerOpError(f"building {build_dir} failed: {' '.join(step)}\n{(done.stdout + done.stderr)[-3000:]}")
    return build_dir / "benchmarks" / "bench_per_op"


def generated_costs_per_call(run: CallgrindRun) -> dict[str, float]:
    """Static mode: each generated function's own instructions per call of its operator, keyed by operator."""
    model, (k1, k2) = run.model, run.iters
    small, large = run.dumps[f"{model.name}|static|{k1}"], run.dumps[f"{model.name}|static|{k2}"]
    per_forward = per_unit_self_cost(small, large, k2 - k1)
    calls_per_forward = {op: model.ops_per_iteration.count(op) * model.loop_iterations for op in model.ops_per_iteration}
    by_function = {unboxing_function_of(op): op for op in calls_per_forward}
    costs: dict[str, float] = {}
    for function, instructions in per_forward.items():
        match = _GENERATED.match(function)
        if match and match.group(1) in by_function:
            op = by_function[match.group(1)]
            costs[op] = costs.get(op, 0.0) + instructions / calls_per_forward[op]
    # The out-of-line check: charged to the operators whose generated function calls it (tensor-list and
    # optional-tensor arguments), per call of those.
    helper = sum(v for f, v in per_forward.items() if f.startswith(CHECK_HELPER))
    callers = [op for op in calls_per_forward if calls_out_of_line_check(op)]
    if helper and callers:
        per_call = helper / sum(calls_per_forward[op] for op in callers)
        for op in callers:
            costs[op] = costs.get(op, 0.0) + per_call
    return costs


def calls_out_of_line_check(op_name: str) -> bool:
    """Whether the op's generated function (with QuantizedCPU) checks an argument with holds_quantized_tensor."""
    catalog = load_native_catalog()
    if op_name not in catalog or catalog[op_name].quantized_kernel is None:
        return False
    return any(
        (check := quantized_check(a.type, "v")) is not None and check.startswith("holds_quantized_tensor")
        for a in catalog[op_name].function.func.arguments.flat_all
    )


def record(model: MicroModel, default: CallgrindRun, cpu_only: CallgrindRun, section: Section) -> None:
    prefix = f"backend_cost/{model.name}"
    with_check, without = generated_costs_per_call(default), generated_costs_per_call(cpu_only)
    for op in sorted(set(with_check) | set(without)):
        a, b = with_check.get(op, 0.0), without.get(op, 0.0)
        section.add(f"{prefix}/{op}/cpu_quantizedcpu", round(a, 1), "instructions/call", "generated function, own cost")
        section.add(f"{prefix}/{op}/cpu_only", round(b, 1), "instructions/call")
        section.add(f"{prefix}/{op}/added", round(a - b, 1), "instructions/call")
    for label, run in (("cpu_quantizedcpu", default), ("cpu_only", cpu_only)):
        k1, k2 = run.iters
        small, large = run.dumps[f"{model.name}|static|{k1}"], run.dumps[f"{model.name}|static|{k2}"]
        per_op = (large.total - small.total) / (k2 - k1) / model.ops_per_forward
        section.add(f"{prefix}/whole_model_{label}", round(per_op, 1), "instructions/op call", "static mode, whole program")


def measure(default_bench: Path, models_dir: Path, cpu_only_build: Path, work_dir: Path, python: Path,
            cmake: Path) -> Section:
    section = Section()
    cpu_only_bench = build_cpu_only(python, cmake, cpu_only_build)
    for model in MICRO_MODELS:
        if not (models_dir / f"{model.name}.ptl").is_file():
            section.skipped.append(f"backend cost {model.name}: {models_dir}/{model.name}.ptl missing")
            continue
        default = run_callgrind(default_bench, model, models_dir, work_dir / "default" / model.name, (2, 5))
        cpu_only = run_callgrind(cpu_only_bench, model, cpu_only_build / "models", work_dir / "cpu" / model.name, (2, 5))
        record(model, default, cpu_only, section)
        added = {f.name.split("/")[2]: f.value for f in section.figures
                 if f.name.startswith(f"backend_cost/{model.name}/") and f.name.endswith("/added")}
        print(f"  backend cost {model.name}: added instructions per call {added}", file=sys.stderr)
    return section
