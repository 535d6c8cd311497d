"""Export the test models for the lite interpreter and write the union of the operators models call.

    python scripts/dump_ops.py                                  # every registered test model
    python scripts/dump_ops.py mobilenet_v2                     # some of them
    python scripts/dump_ops.py --model-file a.ptl --model-file exported/ --output my_ops.yaml
    python scripts/dump_ops.py --ops-yaml old_ops.yaml --model-file new.ptl --output merged.yaml
    python scripts/dump_ops.py --check                          # exit 1 if the committed yaml is stale

Sources mix freely: registered test models (by name), `.ptl` files exported elsewhere (or directories
of them) and ops yamls in either format (torchgen selective-build, or a plain `- aten::add.Tensor`
list). With only --model-file/--ops-yaml sources, no test model is exported. Each operator's
debug_info names every source that needs it: a test model's name, a model file's stem, a yaml's path.

For each test model it also writes, under --models-dir:
  <name>.ptl           the scripted (and frozen) model, saved for the lite interpreter
  <name>.inputs.pt     its example inputs: a torch.save'd list of forward's arguments (tensors, numbers,
                       strings, None, lists, tuples, dicts); trailing ones may be left to their defaults
  <name>.expected.pt   eager PyTorch's outputs on them, flattened in order into a list of tensors
The yaml is replaced atomically and only when its content changes; on any error it is left untouched.
"""
from __future__ import annotations

import argparse
import difflib
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402

from test_models import ModelSpec, get_model, model_names  # noqa: E402
from test_models.registry import ForwardArgument  # noqa: E402
from test_models.quantization import quantized_engine  # noqa: E402
from tools.file_writer import write_if_changed  # noqa: E402
from tools.model_ops import ModelFileError, ops_of_lite_model_bytes  # noqa: E402
from tools.native_ops import load_native_catalog  # noqa: E402
from tools.op_names import KnownOps, known_ops  # noqa: E402
from tools.op_union import SourceError, ops_of_model_paths, ops_of_yamls, render_union, union_of  # noqa: E402
from tools.selection import OpSelectionError  # noqa: E402

DEFAULT_OUTPUT = REPO_ROOT / "lightweight_dispatch_ops.yaml"
DEFAULT_MODELS_DIR = REPO_ROOT / "build" / "models"


@dataclass(frozen=True)
class ExportedModel:
    name: str
    lite_bytes: bytes
    inputs: list[ForwardArgument]
    expected: list[torch.Tensor]
    ops: frozenset[str]


def flatten_outputs(value: object) -> list[torch.Tensor]:
    """A model's outputs as a flat list of tensors, depth first; mirrors flatten_outputs in
    runtime/tensor_io.cpp. Tuples (named ones too) and lists in order, a dict's values in its order
    (not its keys); ints, floats and bools become 0-dim int64, float64 and bool tensors, a string a 1-dim
    uint8 tensor of its UTF-8 bytes, None nothing."""
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
    if isinstance(value, str):
        return [torch.tensor(list(value.encode("utf-8")), dtype=torch.uint8)]
    if value is None:
        return []
    raise TypeError(f"cannot flatten a model output of type {type(value).__name__}")


def export_model(spec: ModelSpec) -> ExportedModel:
    """A quantized model is built, run and exported under its engine: weight packing depends on it."""
    if spec.qengine is None:
        return _export_model(spec)
    with quantized_engine(spec.qengine):
        return _export_model(spec)


def forget_compiled_functions() -> None:
    """TorchScript compiles a free function once per process and every later model reuses it: a helper shared
    by several test models (the detection heads' NMS) then came out of freezing with or without one of its
    operators depending on what ran before it, and the ops yaml's debug_info flipped between runs. Each model
    compiles its helpers afresh, as when it is exported alone."""
    torch.jit._state._jit_caching_layer.clear()


def _export_model(spec: ModelSpec) -> ExportedModel:
    model = spec.build()
    inputs = list(spec.example_inputs())
    with torch.no_grad():
        expected = flatten_outputs(model(*inputs))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TorchScript and the lite interpreter warn they are deprecated
        forget_compiled_functions()
        scripted = torch.jit.script(model)
        if spec.freeze:
            scripted = torch.jit.freeze(scripted)
        lite_bytes = scripted._save_to_buffer_for_lite_interpreter()
    return ExportedModel(spec.name, lite_bytes, inputs, expected, ops_of_lite_model_bytes(lite_bytes, spec.name))


def save_model_files(model: ExportedModel, models_dir: Path) -> None:
    models_dir.mkdir(parents=True, exist_ok=True)
    (models_dir / f"{model.name}.ptl").write_bytes(model.lite_bytes)
    # torch.save's default zip format: LibTorch's reader (torch::jit::pickle_load) cannot read the legacy one.
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
        "--model-file", type=Path, action="append", default=[], metavar="PTL",
        help="a .ptl exported elsewhere, or a directory of them; repeatable",
    )
    parser.add_argument(
        "--ops-yaml", type=Path, action="append", default=[], metavar="YAML",
        help="an ops yaml (torchgen selective-build or plain list) whose operators join the union; repeatable",
    )
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="ops yaml to write (default: %(default)s)")
    parser.add_argument(
        "--models-dir", type=Path, default=DEFAULT_MODELS_DIR, help="where test models' .ptl/.inputs.pt/.expected.pt go"
    )
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 and print the difference if --output is stale"
    )
    return parser.parse_args(argv)


def collect(args: argparse.Namespace, known: KnownOps) -> tuple[dict[str, frozenset[str]], list[ExportedModel]]:
    """Operators by source, and the exported test models. Raises on the first unusable source."""
    ops_by_source: dict[str, frozenset[str]] = {}
    exported: list[ExportedModel] = []
    only_files = bool(args.model_file or args.ops_yaml)
    for name in args.models or ([] if only_files else model_names()):
        model = export_model(get_model(name))
        exported.append(model)
        ops_by_source[model.name] = model.ops
    # Model files and yamls as tools/ops_from_models.py reads them (the build step of SELECTED_MODELS).
    for stem, ops in ops_of_model_paths(args.model_file).items():
        ops_by_source[stem] = ops_by_source.get(stem, frozenset()) | ops
    ops_by_source.update(ops_of_yamls(args.ops_yaml, known))
    return ops_by_source, exported


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    known = known_ops(load_native_catalog())
    try:
        ops_by_source, exported = collect(args, known)
        selection = union_of(ops_by_source)
    except (KeyError, SourceError, ModelFileError, OpSelectionError) as error:
        print(f"dump_ops: error: {error.args[0]}\n(nothing written)", file=sys.stderr)
        return 1
    content = render_union(selection, known)
    if args.check:
        diff = stale_diff(args.output, content)
        if diff:
            print(f"dump_ops: {args.output} is stale; run python scripts/dump_ops.py and commit it:\n{diff}")
            return 1
        print(f"dump_ops: {args.output} is up to date ({len(selection.ops)} operators)")
        return 0
    for model in exported:
        save_model_files(model, args.models_dir)
    changed = write_if_changed(args.output, content)
    print(
        f"dump_ops: {len(selection.ops)} operators from {len(ops_by_source)} source(s) "
        f"{'written to' if changed else 'unchanged in'} {args.output}"
        + (f"; models in {args.models_dir}" if exported else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
