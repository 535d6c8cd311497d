"""Check models against a build: which operators they need that it lacks, and what it carries unused.

    python scripts/check_ops.py --ops-yaml lightweight_dispatch_ops.yaml model.ptl other_models/
    python scripts/check_ops.py --predictor build/lite_predictor model.ptl

With --ops-yaml, the build is the yaml's operator list; with --predictor, it is the set of operators
the built lite_predictor has generated kernels for (`lite_predictor --list-ops --json`). JIT-native
operators (aten::size, prim::*) need no kernel: the interpreter always has them, so they are never
missing. Dispatcher operators outside native_functions.yaml (quantized::*) do need one, like native
ones; those the build reaches only through the c10 dispatcher (LibTorch exports no entry point for
them; quantized_ops.yaml says why) are listed with the reason. Missing operators are printed as the
exact yaml entries to add.

Exit status: 0 when nothing is missing, 1 when something is, 2 on a usage or input error.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from tools.model_ops import ModelFileError, lite_model_files, ops_of_lite_model_file  # noqa: E402
from tools.native_ops import load_native_catalog  # noqa: E402
from tools.op_names import known_ops  # noqa: E402
from tools.quantized_ops import load_quantized_ops  # noqa: E402
from tools.selection import OpSelection, OpSelectionError, SelectedOp, load_op_selection, render_op_selection  # noqa: E402


class CheckError(Exception):
    """An input that cannot be used."""


@dataclass(frozen=True)
class CheckResult:
    missing: OpSelection  # needed by the models, absent from the build, with the models that need each
    unused: tuple[str, ...]  # carried by the build, called by none of the models
    jit_native: tuple[str, ...]  # called by the models, provided by the interpreter itself
    through_dispatcher: tuple[tuple[str, str], ...] = ()  # (op, reason): carried, but called via the dispatcher


@dataclass(frozen=True)
class BuildOps:
    """The operators a build carries, and why any of them goes through the dispatcher."""

    names: frozenset[str]
    dispatcher_reasons: dict[str, str]


def build_ops_from_predictor(predictor: Path) -> BuildOps:
    if not predictor.is_file():
        raise CheckError(f"{predictor}: no such lite_predictor binary")
    try:
        listed = subprocess.run(
            [str(predictor), "--list-ops", "--json"], capture_output=True, text=True, timeout=120, check=True
        )
        ops = json.loads(listed.stdout)["ops"]
        return BuildOps(
            frozenset(op["name"] for op in ops),
            {op["name"]: op["reason"] for op in ops if op.get("path") == "dispatcher"},
        )
    except (subprocess.SubprocessError, OSError, ValueError, KeyError) as error:
        raise CheckError(f"{predictor}: cannot list its operators ({error})") from None


def build_ops_from_yaml(path: Path) -> BuildOps:
    names = load_op_selection(path).names
    declared = load_quantized_ops()
    reasons = {
        name: declared[name].dispatcher_reason
        for name in names
        if name in declared and declared[name].dispatcher_reason is not None
    }
    return BuildOps(names, reasons)  # type: ignore[arg-type]


def check(
    models: dict[str, frozenset[str]],
    build_ops: frozenset[str],
    jit_native: frozenset[str],
    dispatcher_reasons: dict[str, str] | None = None,
) -> CheckResult:
    needed: dict[str, list[str]] = {}
    for model, ops in models.items():
        for op in ops:
            needed.setdefault(op, []).append(model)
    missing = tuple(
        SelectedOp(op, tuple(users)) for op, users in sorted(needed.items())
        if op not in build_ops and op not in jit_native
    )
    return CheckResult(
        missing=OpSelection(missing),
        unused=tuple(sorted(build_ops - set(needed))),
        jit_native=tuple(sorted(op for op in needed if op in jit_native and op not in build_ops)),
        through_dispatcher=tuple(
            (op, reason) for op, reason in sorted((dispatcher_reasons or {}).items()) if op in needed
        ),
    )


def render(result: CheckResult, build_name: str, num_models: int, num_build_ops: int) -> str:
    lines = [f"check_ops: {num_models} model(s) against {build_name} ({num_build_ops} operators)"]
    if result.missing.ops:
        entries = render_op_selection(result.missing).splitlines()
        lines.append(f"missing: {len(result.missing.ops)} operator(s) the models need that the build lacks; add:")
        lines += [line for line in entries if line.startswith("  ")]
    else:
        lines.append("missing: none: the build runs every operator these models call")
    if result.unused:
        lines.append(f"unused: {len(result.unused)} operator(s) the build carries that none of these models call:")
        lines += [f"  {op}" for op in result.unused]
    if result.jit_native:
        lines.append(f"JIT-native (always available, no kernel needed): {', '.join(result.jit_native)}")
    if result.through_dispatcher:
        lines.append(
            f"through the dispatcher: {len(result.through_dispatcher)} operator(s) the build carries but calls "
            "through the c10 dispatcher:"
        )
        lines += [f"  {op}: {reason}" for op, reason in result.through_dispatcher]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python scripts/check_ops.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    build = parser.add_mutually_exclusive_group(required=True)
    build.add_argument("--ops-yaml", type=Path, help="the ops yaml a build was generated from")
    build.add_argument("--predictor", type=Path, help="a built lite_predictor")
    parser.add_argument("models", nargs="+", type=Path, metavar="MODEL", help=".ptl files or directories of them")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        models = {f.stem: ops_of_lite_model_file(f) for path in args.models for f in lite_model_files(path)}
        if args.ops_yaml:
            build, build_name = build_ops_from_yaml(args.ops_yaml), str(args.ops_yaml)
        else:
            build, build_name = build_ops_from_predictor(args.predictor), str(args.predictor)
    except (ModelFileError, OpSelectionError, CheckError) as error:
        print(f"check_ops: error: {error.args[0]}", file=sys.stderr)
        return 2
    known = known_ops(load_native_catalog())
    jit_native = frozenset(op for ops in models.values() for op in ops if known.is_jit_native(op))
    result = check(models, build.names, jit_native, build.dispatcher_reasons)
    print(render(result, build_name, len(models), len(build.names)))
    return 1 if result.missing.ops else 0


if __name__ == "__main__":
    sys.exit(main())
