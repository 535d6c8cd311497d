"""Write the ops yaml for a set of lite-interpreter models: the union of the operators they call.

    python -m tools.ops_from_models --model-file a.ptl --model-file more_models/ --output ops.yaml
    python -m tools.ops_from_models --model-file a.ptl --ops-yaml extra.yaml --output ops.yaml

The build step behind `lightweight_dispatch_add_kernels(<target> MODELS ...)` and CMake's SELECTED_MODELS
(cmake/codegen.cmake); run it from the directory that holds tools/. The yaml is torchgen's selective-build
format, exactly what `scripts/dump_ops.py --model-file ... --output ...` writes for the same files: each
operator's debug_info names the model stems (and yaml paths) that need it.

The output is replaced atomically and only when its content changes, so a build that re-runs this step
regenerates and recompiles nothing when the operators stay the same. Any unusable input (a missing path,
an empty file, a file that is not a zip, a corrupt archive, a TorchScript archive without lite bytecode, a
directory with no .ptl files, a bad ops yaml) exits 1, names the file and the reason on stderr and leaves
the output untouched.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tools.file_writer import write_if_changed
from tools.model_ops import ModelFileError
from tools.native_ops import load_native_catalog
from tools.op_names import known_ops
from tools.op_union import SourceError, ops_of_model_paths, ops_of_yamls, render_union, union_of
from tools.selection import OpSelectionError

PROG = "python -m tools.ops_from_models"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--model-file", type=Path, action="append", required=True, metavar="PTL",
        help="a .ptl saved with _save_for_lite_interpreter, or a directory whose .ptl files are all read; repeatable",
    )
    parser.add_argument(
        "--ops-yaml", type=Path, action="append", default=[], metavar="YAML",
        help="an ops yaml (torchgen selective-build or a plain '- aten::add.Tensor' list) whose operators join "
        "the union; repeatable",
    )
    parser.add_argument("--output", type=Path, required=True, metavar="YAML", help="the ops yaml to write")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        ops_by_source = ops_of_model_paths(args.model_file)
        known = known_ops(load_native_catalog())
        ops_by_source.update(ops_of_yamls(args.ops_yaml, known))
        selection = union_of(ops_by_source)
    except (ModelFileError, OpSelectionError, SourceError) as error:
        print(f"ops_from_models: error: {error.args[0]}\n(nothing written to {args.output})", file=sys.stderr)
        return 1
    changed = write_if_changed(args.output, render_union(selection, known))
    print(
        f"ops_from_models: {len(selection.ops)} operators from {len(ops_by_source)} source(s) "
        f"{'written to' if changed else 'unchanged in'} {args.output}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
