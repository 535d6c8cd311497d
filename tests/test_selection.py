"""The ops yaml: both formats read, torchgen agrees with what we write, bad files are named with a line."""
from __future__ import annotations

from pathlib import Path

import pytest
from torchgen.selective_build.selector import SelectiveBuilder

from tools.selection import OpSelection, OpSelectionError, SelectedOp, parse_op_selection, render_op_selection


def test_plain_list_format_is_read() -> None:
    selection = parse_op_selection("- aten::add.Tensor\n- aten::size\n", "ops.yaml")
    assert selection.names == {"aten::add.Tensor", "aten::size"}


def test_torchgen_format_round_trips_with_debug_info() -> None:
    original = OpSelection((SelectedOp("aten::add.Tensor", ("a", "b")), SelectedOp("aten::relu", ("b",))))
    assert parse_op_selection(render_op_selection(original), "ops.yaml") == original


def test_torchgen_selective_builder_reads_our_yaml(tmp_path: Path) -> None:
    original = OpSelection((SelectedOp("aten::add.Tensor", ("mobilenet_v2",)), SelectedOp("aten::hardtanh_", ("m",))))
    path = tmp_path / "ops.yaml"
    path.write_text(render_op_selection(original))
    builder = SelectiveBuilder.from_yaml_path(str(path))
    assert set(builder.operators) == {"aten::add.Tensor", "aten::hardtanh_"}
    assert builder.is_operator_selected("aten::add.Tensor")
    assert not builder.is_operator_selected("aten::add.Scalar")
    assert not builder.include_all_operators


def test_committed_yaml_is_in_torchgen_format() -> None:
    path = Path(__file__).resolve().parent.parent / "lightweight_dispatch_ops.yaml"
    builder = SelectiveBuilder.from_yaml_path(str(path))
    assert "aten::conv2d" in builder.operators


def test_yaml_syntax_error_names_the_line() -> None:
    with pytest.raises(OpSelectionError, match=r"ops.yaml:3: not valid YAML"):
        parse_op_selection("operators:\n  aten::add.Tensor: {}\n  aten::mul: x: y\n", "ops.yaml")


def test_malformed_op_name_is_rejected() -> None:
    with pytest.raises(OpSelectionError, match="'add' is not an operator name"):
        parse_op_selection("- add\n", "ops.yaml")
