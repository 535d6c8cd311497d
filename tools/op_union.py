"""The union of the operators model files and ops yamls need, each operator attributed to its sources.

Shared by scripts/dump_ops.py (which adds the registered test models) and tools/ops_from_models.py (the
build step behind `lightweight_dispatch_add_kernels(... MODELS ...)`), so the same files give the same yaml.
A source is named by a model file's stem or a yaml's path; that name is the operator's debug_info.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

from tools.model_ops import lite_model_files, ops_of_lite_model_file
from tools.op_names import KnownOps, unknown_op_message
from tools.selection import OpSelection, SelectedOp, load_op_selection, render_op_selection


class SourceError(Exception):
    """A source that cannot join the union, or a union that cannot be written, with the reason."""


def ops_of_model_paths(paths: Iterable[Path]) -> dict[str, frozenset[str]]:
    """Operators by model stem, for .ptl files and directories of them (raises ModelFileError).

    Two files with one stem (a.ptl and more/a.ptl) share a source name: their operators are merged, not replaced.
    """
    ops_by_source: dict[str, frozenset[str]] = {}
    for path in paths:
        for model_file in lite_model_files(path):
            ops_by_source[model_file.stem] = ops_by_source.get(model_file.stem, frozenset()) | ops_of_lite_model_file(
                model_file
            )
    return ops_by_source


def ops_of_yaml(path: Path, known: KnownOps) -> frozenset[str]:
    """The operators an ops yaml lists, each checked to exist in the installed torch (raises OpSelectionError)."""
    selection = load_op_selection(path)
    if selection.include_all_operators:
        raise SourceError(f"{path}: include_all_operators is true; a union needs explicit operators")
    unknown = [unknown_op_message(op.name, known, str(path)) for op in selection.ops if not known.exists(op.name)]
    if unknown:
        raise SourceError("\n".join(unknown))
    return selection.names


def ops_of_yamls(paths: Iterable[Path], known: KnownOps) -> dict[str, frozenset[str]]:
    return {str(path): ops_of_yaml(path, known) for path in paths}


def union_of(ops_by_source: dict[str, frozenset[str]]) -> OpSelection:
    """Every operator once, with the sources that call it in the order they were given. Refuses an empty union:
    a build with no kernels is never what was meant."""
    users: dict[str, list[str]] = {}
    for source, ops in ops_by_source.items():
        for op in ops:
            users.setdefault(op, []).append(source)
    if not users:
        raise SourceError("the sources call no operators; refusing to write an empty selection")
    return OpSelection(tuple(SelectedOp(op, tuple(users[op])) for op in sorted(users)))


def render_union(selection: OpSelection, known: KnownOps) -> str:
    """The ops yaml, with JIT-native and non-native dispatcher operators marked (tools/selection.py)."""
    jit_native = frozenset(name for name in selection.names if known.is_jit_native(name))
    non_native = frozenset(name for name in selection.names if known.is_non_native_dispatcher_op(name))
    return render_op_selection(selection, jit_native, non_native)
