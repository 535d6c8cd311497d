"""Export the test models for the lite interpreter and record the operators they call.

    python scripts/dump_ops.py                      # every registered test model
    python scripts/dump_ops.py mobilenet_v2         # some of them
    python scripts/dump_ops.py --model-file my.ptl  # also the ops of models exported elsewhere
    python scripts/dump_ops.py --check              # exit 1 if the committed yaml is stale

For each test model it writes, under --models-dir:
  <name>.ptl           the scripted (and frozen) model, saved for the lite interpreter
  <name>.inputs.pt     its example inputs, a torch.save'd list of tensors
  <name>.expected.pt   eager PyTorch's outputs on them, flattened in order into a list of tensors
and writes the union of the operators, with the models that use each, to --output in torchgen's
selective-build format. The yaml is replaced atomically: a failure leaves the previous file intact.
"""
from __future__ import annotations

import argparse
import difflib
import io
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402
from torch.jit.mobile import _export_operator_list, _load_for_lite_interpreter  # noqa: E402

from test_models import ModelSpec, get_model, model_names  # noqa: E402
from tools.file_writer import write_if_changed  # noqa: E402
from tools.selection import OpSelection, SelectedOp, render_op_selection  # noqa: E402

DEFAULT_OUTPUT = REPO_ROOT / "lightweight_dispatch_ops.yaml"
DEFAULT_MODELS_DIR = REPO_ROOT / "build" / "models"


class DumpError(Exception):
    """A source that cannot be read, with the reason."""


@dataclass(frozen=True)
class ExportedModel:
    name: str
    lite_bytes: bytes
    inputs: list[torch.Tensor]
    expected: list[torch.Tensor]
    ops: frozenset[str]


def flatten_outputs(value: object) -> list[torch.Tensor]:
    """A model's outputs as a flat list of tensors; mirrors flatten_outputs in lite_predictor/tensor_io.cpp."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in flatten_outputs(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in flatten_outputs(v)]
    if isinstance(value, bool):
        return [torch.tensor(value, dtype=torch.bool)]
    if isinstance(value, int):
        return [torch.tensor(value, dtype=torch.int64)]
    if isinstance(value, float):
        return [torch.tensor(value, dtype=torch.float64)]
    if value is None:
        return []
    raise TypeError(f"cannot flatten a model output of type {type(value).__name__}")


def ops_of_lite_module(lite_bytes: bytes, source: str) -> frozenset[str]:
    try:
        module = _load_for_lite_interpreter(io.BytesIO(lite_bytes))
    except Exception as error:  # torch raises RuntimeError or its own subclasses for bad files
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise DumpError(f"{source}: not a lite-interpreter model: {first_line}") from None
    return frozenset(_export_operator_list(module))


def export_model(spec: ModelSpec) -> ExportedModel:
    model = spec.build()
    inputs = list(spec.example_inputs())
    with torch.no_grad():
        expected = flatten_outputs(model(*inputs))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TorchScript and the lite interpreter warn they are deprecated
        scripted = torch.jit.script(model)
        if spec.freeze:
            scripted = torch.jit.freeze(scripted)
        lite_bytes = scripted._save_to_buffer_for_lite_interpreter()
    return ExportedModel(spec.name, lite_bytes, inputs, expected, ops_of_lite_module(lite_bytes, spec.name))


def ops_of_model_file(path: Path) -> frozenset[str]:
    if not path.is_file():
        raise DumpError(f"{path}: no such model file")
    return ops_of_lite_module(path.read_bytes(), str(path))


def union_of(ops_by_source: dict[str, frozenset[str]]) -> OpSelection:
    users: dict[str, list[str]] = {}
    for source in sorted(ops_by_source):
        for op in ops_by_source[source]:
            users.setdefault(op, []).append(source)
    return OpSelection(tuple(SelectedOp(op, tuple(users[op])) for op in sorted(users)))


def save_model_files(model: ExportedModel, models_dir: Path) -> None:
    models_dir.mkdir(parents=True, exist_ok=True)
    (models_dir / f"{model.name}.ptl").write_bytes(model.lite_bytes)
    torch.save(model.inputs, models_dir / f"{model.name}.inputs.pt")
    torch.save(model.expected, models_dir / f"{model.name}.expected.pt")


def stale_diff(path: Path, fresh: str) -> str:
    """The unified diff from the file at `path` to `fresh`; empty when they agree."""
    current = path.read_text(encoding="utf-8") if path.exists() else ""
    return "".join(
        difflib.unified_diff(
            current.splitlines(keepends=True),
            fresh.splitlines(keepends=True),
            fromfile=f"{path.name} (committed)",
            tofile=f"{path.name} (from the models)",
        )
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python scripts/dump_ops.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "models", nargs="*", metavar="MODEL", help=f"registered test models (default: all of {', '.join(model_names())})"
    )
    parser.add_argument(
        "--model-file", type=Path, action="append", default=[], help="a .ptl exported elsewhere; repeatable"
    )
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="ops yaml to write (default: %(default)s)")
    parser.add_argument(
        "--models-dir", type=Path, default=DEFAULT_MODELS_DIR, help="where .ptl/.inputs.pt/.expected.pt go"
    )
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 and print the difference if --output is stale"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        specs = [get_model(name) for name in (args.models or ([] if args.model_file else model_names()))]
        ops_by_source: dict[str, frozenset[str]] = {}
        exported = []
        for spec in specs:
            model = export_model(spec)
            exported.append(model)
            ops_by_source[model.name] = model.ops
        for path in args.model_file:
            ops_by_source[path.stem] = ops_of_model_file(path)
    except (KeyError, DumpError) as error:
        print(f"dump_ops: error: {error.args[0]}", file=sys.stderr)
        return 1
    selection = union_of(ops_by_source)
    if not selection.ops:
        print("dump_ops: error: the models call no operators; refusing to write an empty selection", file=sys.stderr)
        return 1
    content = render_op_selection(selection)
    if args.check:
        diff = stale_diff(args.output, content)
        if diff:
            print(f"dump_ops: {args.output} is stale; run python scripts/dump_ops.py and commit it:\n{diff}")
            return 1
        print(f"dump_ops: {args.output} is up to date ({len(selection.ops)} operators)")
        return 0
    for model in exported:
        save_model_files(model, args.models_dir)
    write_if_changed(args.output, content)
    print(
        f"dump_ops: {len(selection.ops)} operators from {len(ops_by_source)} source(s) written to {args.output}; "
        f"models in {args.models_dir}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
