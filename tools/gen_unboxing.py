"""Generate statically dispatched unboxing functions for the selected operators.

    python -m tools.gen_unboxing --op-selection-yaml-path lightweight_dispatch_ops.yaml --install-dir build/generated
    python -m tools.gen_unboxing --all-ops --install-dir build/generated_all

Writes UnboxingShard_<i>.cpp (the unboxing functions, split so that a one-op change recompiles one
shard), KernelTable.cpp (the table lite_predictor binds from), CustomOpRegistration.cpp (the
project's own operators this build carries, registered with the dispatcher on request) and
codegen_report.json. A file whose
content did not change is not rewritten.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from tools.cpp_types import UnsupportedType
from tools.custom_ops import DEFAULT_CUSTOM_OPS_YAML, CustomOp, CustomOpsError, load_custom_ops
from tools.emit_unboxing import (
    GeneratedKernel,
    emit_backend_select_kernel,
    emit_custom_op_registration,
    emit_dispatcher_kernel,
    emit_generated_kernel,
    emit_kernel_table,
    emit_shard,
    shard_of,
    unboxing_function_name,
)
from tools.file_writer import write_if_changed
from tools.jit_ops import dispatcher_has_operator, jit_operator_names
from tools.native_ops import NativeCatalog, NativeOp, load_native_catalog
from tools.quantized_ops import DEFAULT_QUANTIZED_OPS_YAML, QuantizedOp, QuantizedOpsError, load_quantized_ops
from tools.selection import OpSelectionError, load_op_selection
from tools.stage_companions import Companion, stage_companions

DEFAULT_NUM_SHARDS = 4
# The backends static dispatch can call kernels of; CPU is required. PyTorch's static dispatch took such a list too.
SUPPORTED_BACKENDS = ("CPU", "QuantizedCPU")
DEFAULT_BACKENDS = ("CPU", "QuantizedCPU")


class GenerationError(Exception):
    """The selection cannot be generated; the message names each offending op and why."""


@dataclass(frozen=True)
class GenerationResult:
    kernels: tuple[GeneratedKernel, ...]
    unsupported: tuple[tuple[str, str], ...]  # (op name, reason)
    jit_native: tuple[str, ...]  # selected ops that keep the interpreter's own implementation


def parse_backends(text: str) -> tuple[str, ...]:
    """`CPU;QuantizedCPU` (CMake's list) or `CPU,QuantizedCPU` -> the backends, validated."""
    backends = tuple(b.strip() for b in text.replace(";", ",").split(",") if b.strip())
    unknown = [b for b in backends if b not in SUPPORTED_BACKENDS]
    if unknown or "CPU" not in backends:
        raise GenerationError(
            f"static dispatch backends {text!r}: " + (f"unknown {', '.join(unknown)}; " if unknown else "CPU is required; ")
            + f"choose from {', '.join(SUPPORTED_BACKENDS)} (CPU first), e.g. CPU;QuantizedCPU"
        )
    return backends


def generate_kernel(op: NativeOp, backends: tuple[str, ...] = ("CPU",)) -> GeneratedKernel:
    """A native op's unboxing function: its CPU kernel, choosing QuantizedCPU per call where the build has it."""
    quantized = op.quantized_kernel if "QuantizedCPU" in backends else None
    if quantized is not None:
        # A factory op (no tensor argument) is dispatched by its dtype, not its inputs: CPU only.
        try:
            return emit_backend_select_kernel(op.name, op.schema, op.function.func, op.kernel, quantized)
        except UnsupportedType:
            if op.kernel is None:
                raise
    if op.kernel is None:
        raise UnsupportedType(op.unsupported_reason or "unsupported")
    return emit_generated_kernel(op.name, op.schema, op.function.func, op.kernel)


def generate_custom_kernel(op: CustomOp) -> GeneratedKernel:
    return emit_generated_kernel(op.name, op.schema, op.func, op.kernel)


def generate_quantized_kernel(op: QuantizedOp) -> GeneratedKernel:
    if op.kernel is None:
        return emit_dispatcher_kernel(op.name, op.schema, op.dispatcher_reason or "")
    return emit_generated_kernel(op.name, op.schema, op.func, op.kernel, op.class_arguments)


def undeclared_dispatcher_op_message(names: list[str]) -> str:
    return (
        "dispatcher operators outside native_functions.yaml that quantized_ops.yaml does not declare: "
        + ", ".join(names)
        + "\nDeclare each in quantized_ops.yaml with its JIT schema and how to call it (method, kernel, or "
        "dispatcher with the reason LibTorch exports no entry point)."
    )


def generate_for_names(
    catalog: NativeCatalog,
    names: list[str],
    jit_ops: frozenset[str],
    custom: dict[str, CustomOp] | None = None,
    quantized: dict[str, QuantizedOp] | None = None,
    backends: tuple[str, ...] = ("CPU",),
    is_dispatcher_op: Callable[[str], bool] = dispatcher_has_operator,
) -> GenerationResult:
    """Generate every selected native, custom and quantized op. Others must be JIT-native; anything else is an error."""
    custom = custom or {}
    quantized = quantized or {}
    kernels: list[GeneratedKernel] = []
    unsupported: list[tuple[str, str]] = []
    jit_native: list[str] = []
    undeclared: list[str] = []
    unknown: list[str] = []
    for name in sorted(names):
        if name in catalog:
            try:
                kernels.append(generate_kernel(catalog[name], backends))
            except UnsupportedType as error:
                unsupported.append((name, str(error)))
        elif name in custom:
            kernels.append(generate_custom_kernel(custom[name]))
        elif name in quantized:
            if "QuantizedCPU" not in backends:
                unsupported.append((name, "a QuantizedCPU operator; add QuantizedCPU to STATIC_DISPATCH_BACKEND"))
                continue
            try:
                kernels.append(generate_quantized_kernel(quantized[name]))
            except UnsupportedType as error:
                unsupported.append((name, str(error)))
        elif name in jit_ops and is_dispatcher_op(name):
            undeclared.append(name)
        elif name in jit_ops:
            jit_native.append(name)
        else:
            unknown.append(name)
    if undeclared:
        raise GenerationError(undeclared_dispatcher_op_message(undeclared))
    if unknown:
        raise GenerationError(
            "operators that are neither native functions of the installed torch, custom_ops.yaml or "
            "quantized_ops.yaml entries nor JIT-native operators: "
            + ", ".join(unknown)
        )
    return GenerationResult(tuple(kernels), tuple(unsupported), tuple(jit_native))


def generate_all(
    catalog: NativeCatalog,
    custom: dict[str, CustomOp] | None = None,
    quantized: dict[str, QuantizedOp] | None = None,
    backends: tuple[str, ...] = ("CPU",),
) -> GenerationResult:
    kernels: list[GeneratedKernel] = [generate_custom_kernel(op) for _, op in sorted((custom or {}).items())]
    if "QuantizedCPU" in backends:
        kernels += [generate_quantized_kernel(op) for _, op in sorted((quantized or {}).items())]
    unsupported: list[tuple[str, str]] = []
    for name in sorted(catalog.ops):
        try:
            kernels.append(generate_kernel(catalog[name], backends))
        except UnsupportedType as error:
            unsupported.append((name, str(error)))
    return GenerationResult(tuple(kernels), tuple(unsupported), ())


def render_outputs(
    result: GenerationResult, num_shards: int, source: str, custom: dict[str, CustomOp] | None = None
) -> dict[str, str]:
    """File name -> content for everything the generator writes except the report."""
    shards: list[list[GeneratedKernel]] = [[] for _ in range(num_shards)]
    for kernel in result.kernels:
        shards[shard_of(kernel.op_name, num_shards)].append(kernel)
    files = {
        f"UnboxingShard_{i}.cpp": emit_shard(kernels, i, num_shards, source) for i, kernels in enumerate(shards)
    }
    files["KernelTable.cpp"] = emit_kernel_table(list(result.kernels), source)
    generated = {kernel.op_name for kernel in result.kernels}
    registrations = [
        (op.namespace, str(op.func), unboxing_function_name(name))
        for name, op in sorted((custom or {}).items())
        if name in generated
    ]
    files["CustomOpRegistration.cpp"] = emit_custom_op_registration(registrations, "custom_ops.yaml")
    return files


def render_report(
    catalog: NativeCatalog,
    result: GenerationResult,
    selected: int | None,
    backends: tuple[str, ...] = ("CPU",),
    quantized: dict[str, QuantizedOp] | None = None,
    companions: tuple[Companion, ...] = (),
) -> str:
    quantized = quantized or {}
    report = {
        "backends": list(backends),
        "native_functions_total": len(catalog.ops),
        "reachable_cpu": catalog.reachable_cpu,
        "reachable_cpu_or_quantized_cpu": catalog.reachable_cpu_or_quantized,
        "selected": selected,
        "generated": sum(1 for k in result.kernels if k.op_name in catalog),
        "custom_generated": sorted(k.op_name for k in result.kernels if k.op_name not in catalog and k.op_name not in quantized),
        "quantized_generated": sorted(k.op_name for k in result.kernels if k.op_name in quantized),
        # Native ops whose generated function picks QuantizedCPU or CPU from its tensor arguments, per call.
        "backend_select": sorted(k.op_name for k in result.kernels if k.chooses_backend),
        # The only generated functions that call into the c10 dispatcher, each with the reason.
        "dispatcher_path": [{"name": k.op_name, "reason": k.dispatcher_reason} for k in result.kernels if k.dispatcher_reason],
        "jit_native": list(result.jit_native),
        # Not selected: generated for the bind-time stage, which calls each instead of the selected one it serves.
        "stage_companions": [{"name": c.name, "serves": c.serves} for c in companions],
        "unsupported": [{"name": n, "reason": r} for n, r in result.unsupported],
        "kernels_by_dispatch_key": _count_by_key(catalog, result, frozenset(quantized)),
    }
    return json.dumps(report, indent=2) + "\n"


def _count_by_key(catalog: NativeCatalog, result: GenerationResult, quantized: frozenset[str]) -> dict[str, int]:
    """Generated functions by what they call: a dispatch key's kernels, quantized_ops.yaml's, custom, dispatcher."""
    counts: dict[str, int] = {}
    for kernel in result.kernels:
        if kernel.dispatcher_reason:
            key = "dispatcher"
        elif kernel.op_name in quantized:
            key = "quantized_ops.yaml"
        elif kernel.op_name in catalog:
            op = catalog[kernel.op_name]
            key = op.kernel.dispatch_key if op.kernel is not None else "QuantizedCPU"
        else:
            key = "custom"
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items()))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tools.gen_unboxing",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--op-selection-yaml-path",
        type=Path,
        help="ops yaml (torchgen selective-build format or a plain list) naming the operators to generate",
    )
    which.add_argument("--all-ops", action="store_true", help="generate every native function CPU can reach")
    parser.add_argument("--install-dir", type=Path, required=True, help="directory for the generated files")
    parser.add_argument(
        "--custom-ops-yaml",
        type=Path,
        default=DEFAULT_CUSTOM_OPS_YAML,
        help="the project's own operators (default: %(default)s)",
    )
    parser.add_argument(
        "--quantized-ops-yaml",
        type=Path,
        default=DEFAULT_QUANTIZED_OPS_YAML,
        help="dispatcher operators outside native_functions.yaml, e.g. quantized::* (default: %(default)s)",
    )
    parser.add_argument(
        "--backends",
        default=",".join(DEFAULT_BACKENDS),
        help="backends static dispatch calls kernels of, comma- or semicolon-separated (default: %(default)s); "
        "with QuantizedCPU, a native op that has a QuantizedCPU kernel picks it when a tensor argument is quantized",
    )
    parser.add_argument(
        "--num-shards",
        type=int,
        default=DEFAULT_NUM_SHARDS,
        help=f"number of UnboxingShard_<i>.cpp files (default {DEFAULT_NUM_SHARDS}); compiled in parallel",
    )
    args = parser.parse_args(argv)
    if args.num_shards < 1:
        parser.error("--num-shards must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    catalog = load_native_catalog()
    companions: tuple[Companion, ...] = ()
    try:
        backends = parse_backends(args.backends)
        custom = load_custom_ops(args.custom_ops_yaml)
        quantized = load_quantized_ops(args.quantized_ops_yaml)
        if args.all_ops:
            result = generate_all(catalog, custom, quantized, backends)
            source, selected = "native_functions.yaml (all operators)", None
        else:
            selection = load_op_selection(args.op_selection_yaml_path)
            if selection.include_all_operators:
                result = generate_all(catalog, custom, quantized, backends)
            else:
                companions = stage_companions(selection.names, catalog)
                result = generate_for_names(
                    catalog, sorted(selection.names | {c.name for c in companions}), jit_operator_names(), custom,
                    quantized, backends,
                )
            source, selected = args.op_selection_yaml_path.name, len(selection.ops)
    except (OpSelectionError, GenerationError, CustomOpsError, QuantizedOpsError) as error:
        print(f"gen_unboxing: error: {error}", file=sys.stderr)
        return 1
    if result.unsupported and not args.all_ops:
        lines = "\n".join(f"  {name}: {reason}" for name, reason in result.unsupported)
        print(f"gen_unboxing: error: selected operators that cannot be statically dispatched:\n{lines}", file=sys.stderr)
        return 1
    files = render_outputs(result, args.num_shards, source, custom)
    files["codegen_report.json"] = render_report(catalog, result, selected, backends, quantized, companions)
    written = [name for name, content in sorted(files.items()) if write_if_changed(args.install_dir / name, content)]
    print(
        f"gen_unboxing: {len(result.kernels)} kernels ({'; '.join(backends)}; {len(companions)} for the bind-time stage), "
        f"{sum(1 for k in result.kernels if k.dispatcher_reason)} through the dispatcher, "
        f"{len(result.jit_native)} JIT-native ops kept, "
        f"{len(result.unsupported)} unsupported; {len(written)} of {len(files)} files rewritten in {args.install_dir}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
