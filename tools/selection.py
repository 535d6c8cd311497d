"""The ops yaml: which operators a build carries and which models need each.

Two formats are read:
  * torchgen's selective-build format (written by `scripts/dump_ops.py`, read by PyTorch's and
    ExecuTorch's selective builds):
        include_all_operators: false
        operators:
          aten::add.Tensor: {is_root_operator: true, ..., debug_info: [mobilenet_v2]}
  * the plain list of the original lightweight_dispatch_ops.yaml:
        - aten::add.Tensor
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

_OP_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*::[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)?$")


class OpSelectionError(ValueError):
    """An ops yaml that cannot be used, with a message that says where and why."""


@dataclass(frozen=True)
class SelectedOp:
    """One operator, by its exact `namespace::name.overload`, and the sources (models, yamls) that need it."""

    name: str
    used_by: tuple[str, ...] = ()


@dataclass(frozen=True)
class OpSelection:
    ops: tuple[SelectedOp, ...]
    include_all_operators: bool = False

    @property
    def names(self) -> frozenset[str]:
        return frozenset(op.name for op in self.ops)


def validate_op_name(name: object, source: str) -> str:
    if not isinstance(name, str) or not _OP_NAME.match(name):
        raise OpSelectionError(
            f"{source}: {name!r} is not an operator name; expected 'namespace::name' or "
            "'namespace::name.overload', e.g. 'aten::add.Tensor'"
        )
    return name


def _used_by(info: object, name: str, source: str) -> tuple[str, ...]:
    if info is None:
        return ()
    if not isinstance(info, dict):
        raise OpSelectionError(f"{source}: the entry for {name} must be a mapping, got {type(info).__name__}")
    debug_info = info.get("debug_info") or []
    if not isinstance(debug_info, list) or not all(isinstance(d, str) for d in debug_info):
        raise OpSelectionError(f"{source}: debug_info of {name} must be a list of strings")
    return tuple(debug_info)


def parse_op_selection(text: str, source: str) -> OpSelection:
    """Parse either ops-yaml format. `source` names the file in error messages."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        problem = getattr(error, "problem", None) or str(error)
        raise OpSelectionError(f"{where}: not valid YAML: {problem}") from None
    if isinstance(data, list):
        names = [validate_op_name(entry, source) for entry in data]
        return OpSelection(tuple(SelectedOp(n) for n in sorted(set(names))))
    if isinstance(data, dict):
        include_all = data.get("include_all_operators", False)
        if not isinstance(include_all, bool):
            raise OpSelectionError(f"{source}: include_all_operators must be true or false")
        operators = data.get("operators") or {}
        if not isinstance(operators, dict):
            raise OpSelectionError(f"{source}: 'operators' must be a mapping from operator name to its info")
        ops = tuple(
            SelectedOp(validate_op_name(name, source), _used_by(info, name, source))
            for name, info in sorted(operators.items())
        )
        return OpSelection(ops, include_all)
    if data is None:
        return OpSelection(())
    raise OpSelectionError(
        f"{source}: expected a list of operator names or torchgen's selective-build mapping, "
        f"got {type(data).__name__}"
    )


def load_op_selection(path: Path) -> OpSelection:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise OpSelectionError(f"{path}: no such ops yaml") from None
    except (IsADirectoryError, UnicodeDecodeError) as error:
        raise OpSelectionError(f"{path}: cannot read as an ops yaml: {error}") from None
    return parse_op_selection(text, str(path))


NON_NATIVE_MARK = "# dispatcher op, not native"


def render_op_selection(
    selection: OpSelection, jit_native: frozenset[str] = frozenset(), non_native: frozenset[str] = frozenset()
) -> str:
    """torchgen's selective-build format, one operator per line, sorted, so diffs stay readable.

    Operators in `jit_native` get a trailing comment: the interpreter implements them itself and the
    generator makes no kernel for them. Operators in `non_native` (c10 dispatcher operators registered
    outside native_functions.yaml, such as quantized::add) get another: the generator makes their kernels
    from quantized_ops.yaml.
    """
    lines = [
        "# Operators the lite_predictor build carries, written by scripts/dump_ops.py.",
        "# debug_info lists the sources (models, model files, ops yamls) that call each operator;",
        "# '# JIT-native' marks operators the interpreter implements itself (no kernel is generated);",
        f"# '{NON_NATIVE_MARK}' marks dispatcher operators outside native_functions.yaml (kernels generated",
        "# from quantized_ops.yaml).",
        f"include_all_operators: {'true' if selection.include_all_operators else 'false'}",
        "operators:" if selection.ops else "operators: {}",
    ]
    for op in sorted(selection.ops, key=lambda o: o.name):
        used_by = ", ".join(op.used_by)
        mark = "  # JIT-native" if op.name in jit_native else f"  {NON_NATIVE_MARK}" if op.name in non_native else ""
        lines.append(
            f"  {op.name}: {{is_root_operator: true, is_used_for_training: false, "
            f"include_all_overloads: false, debug_info: [{used_by}]}}{mark}"
        )
    return "\n".join(lines) + "\n"
