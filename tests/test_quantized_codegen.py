"""Static dispatch beyond float CPU, without a compiler: quantized_ops.yaml, per-call backend choice, and the
classification of every operator a selection can name."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from tools import gen_unboxing
from tools.cpp_types import UnsupportedType
from tools.emit_unboxing import emit_kernel_table
from tools.gen_unboxing import GenerationError, generate_for_names, generate_kernel, parse_backends
from tools.jit_ops import dispatcher_has_operator, jit_operator_names
from tools.native_ops import NativeCatalog, load_native_catalog
from tools.op_names import known_ops
from tools.quantized_ops import QuantizedOp, QuantizedOpsError, load_quantized_ops, parse_quantized_op
from tools.selection import NON_NATIVE_MARK, OpSelection, SelectedOp, render_op_selection

BOTH = ("CPU", "QuantizedCPU")


@pytest.fixture(scope="module")
def catalog() -> NativeCatalog:
    return load_native_catalog()


@pytest.fixture(scope="module")
def quantized() -> dict[str, QuantizedOp]:
    return load_quantized_ops()


def generate(catalog: NativeCatalog, quantized: dict[str, QuantizedOp], names: list[str], backends=BOTH):
    return generate_for_names(catalog, names, jit_operator_names(), {}, quantized, backends)


def definition(catalog: NativeCatalog, quantized: dict[str, QuantizedOp], name: str, backends=BOTH) -> str:
    (kernel,) = generate(catalog, quantized, [name], backends).kernels
    return kernel.definition


# --- quantized_ops.yaml


def test_every_declared_schema_is_the_installed_torchs(quantized: dict[str, QuantizedOp]) -> None:
    registered = {str(s) for s in torch._C._jit_get_all_schemas()}
    for op in quantized.values():
        assert op.schema in registered, op.schema


def test_every_declared_op_is_a_dispatcher_op_outside_native_functions(
    catalog: NativeCatalog, quantized: dict[str, QuantizedOp]
) -> None:
    for name in quantized:
        assert name not in catalog
        assert dispatcher_has_operator(name), name


def test_conv_calls_the_packed_weights_virtual_method(catalog: NativeCatalog, quantized: dict[str, QuantizedOp]) -> None:
    code = definition(catalog, quantized, "quantized::conv2d_relu.new")
    assert "args[1].toCustomClass<ConvPackedParamsBase<2>>()" in code
    assert "replace_arguments(stack, 4, packed_weight->apply_relu(qx, output_scale, output_zero_point));" in code


def test_dynamic_linear_calls_apply_dynamic(catalog: NativeCatalog, quantized: dict[str, QuantizedOp]) -> None:
    code = definition(catalog, quantized, "quantized::linear_dynamic")
    assert "args[1].toCustomClass<LinearPackedParamsBase>()" in code
    assert "W_prepack->apply_dynamic(X, reduce_range)" in code


def test_quantized_add_calls_the_exported_function(catalog: NativeCatalog, quantized: dict[str, QuantizedOp]) -> None:
    code = definition(catalog, quantized, "quantized::add")
    assert "at::native::quantized_add(qa, qb, scale, zero_point)" in code
    assert "dispatcher" not in code


def test_an_op_without_entry_point_goes_through_its_handle_with_the_reason(
    catalog: NativeCatalog, quantized: dict[str, QuantizedOp]
) -> None:
    (kernel,) = generate(catalog, quantized, ["quantized::cat"]).kernels
    assert kernel.dispatcher_reason and "exports no entry point" in kernel.dispatcher_reason
    assert 'find_dispatcher_operator("quantized::cat", "")' in kernel.definition
    assert f"// kernel: the c10 dispatcher, because {kernel.dispatcher_reason}" in kernel.definition
    table = emit_kernel_table([kernel], "test")
    assert json.dumps(kernel.dispatcher_reason) in table  # the row carries the reason lite_predictor reports


def test_static_rows_carry_no_dispatcher_reason(catalog: NativeCatalog, quantized: dict[str, QuantizedOp]) -> None:
    (kernel,) = generate(catalog, quantized, ["quantized::add"]).kernels
    assert kernel.dispatcher_reason is None
    assert "&generated::quantized_add,\n     nullptr}" in emit_kernel_table([kernel], "test")


def test_a_method_entry_must_name_a_class_argument() -> None:
    entry = {
        "func": "quantized::add(Tensor qa, Tensor qb, float scale, int zero_point) -> Tensor qc",
        "method": "qa.apply",
        "header": "x.h",
    }
    with pytest.raises(QuantizedOpsError, match="class-typed argument"):
        parse_quantized_op(entry, "test.yaml")


def test_an_entry_needs_exactly_one_way_to_call_it() -> None:
    with pytest.raises(QuantizedOpsError, match="exactly one of method, kernel, dispatcher"):
        parse_quantized_op({"func": "quantized::add(Tensor qa) -> Tensor", "kernel": "f", "dispatcher": "x"}, "t")


def test_quantized_ops_need_the_quantized_backend(catalog: NativeCatalog, quantized: dict[str, QuantizedOp]) -> None:
    result = generate(catalog, quantized, ["quantized::add"], backends=("CPU",))
    assert result.kernels == ()
    assert result.unsupported == (("quantized::add", "a QuantizedCPU operator; add QuantizedCPU to STATIC_DISPATCH_BACKEND"),)


def test_an_undeclared_dispatcher_op_stops_the_generator_naming_it(catalog: NativeCatalog) -> None:
    # A real dispatcher op outside native_functions.yaml that quantized_ops.yaml does not declare.
    name = "quantized::embedding_bag_byte_rowwise_offsets"
    assert dispatcher_has_operator(name)
    with pytest.raises(GenerationError, match=re.escape(name)) as error:
        generate_for_names(catalog, [name], jit_operator_names(), {}, {}, BOTH)
    assert "Declare each in quantized_ops.yaml" in str(error.value)


# --- native ops with a QuantizedCPU kernel


def test_native_op_chooses_quantized_cpu_per_call(catalog: NativeCatalog, quantized: dict[str, QuantizedOp]) -> None:
    code = definition(catalog, quantized, "aten::dequantize.self")
    assert code.index("if (self.is_quantized()) {") < code.index("at::native::dequantize_quantized(self)")
    assert code.index("return;") < code.index("at::cpu::dequantize(self)")


def test_with_cpu_only_the_native_op_is_todays_function(catalog: NativeCatalog, quantized: dict[str, QuantizedOp]) -> None:
    code = definition(catalog, quantized, "aten::dequantize.self", backends=("CPU",))
    assert "is_quantized" not in code and "at::native::" not in code
    assert "replace_arguments(stack, 1, at::cpu::dequantize(self));" in code


def test_tensor_list_ops_check_every_element(catalog: NativeCatalog, quantized: dict[str, QuantizedOp]) -> None:
    code = definition(catalog, quantized, "aten::cat")
    assert "if (holds_quantized_tensor(args[0])) {" in code
    assert "at::native::cat_quantized_cpu(tensors, dim)" in code


def test_in_place_ops_keep_their_mutable_reference(catalog: NativeCatalog, quantized: dict[str, QuantizedOp]) -> None:
    code = definition(catalog, quantized, "aten::hardtanh_")
    assert "at::Tensor& self = args[0].toTensor();" in code
    assert "at::native::hardtanh_quantized_cpu_(self, min_val, max_val)" in code


def test_a_quantized_only_native_op_refuses_float_tensors(catalog: NativeCatalog, quantized: dict[str, QuantizedOp]) -> None:
    with pytest.raises(UnsupportedType, match="no CPU or composite kernel"):
        generate_kernel(catalog["aten::q_scale"], ("CPU",))
    code = definition(catalog, quantized, "aten::q_scale")
    assert 'throw_no_cpu_kernel("aten::q_scale")' in code
    assert "at::native::q_scale_quant(self)" in code


def test_factory_ops_stay_on_cpu(catalog: NativeCatalog, quantized: dict[str, QuantizedOp]) -> None:
    # empty.memory_format has a QuantizedCPU kernel, chosen by dtype rather than by a tensor argument.
    assert catalog["aten::empty.memory_format"].quantized_kernel is not None
    code = definition(catalog, quantized, "aten::empty.memory_format")
    assert "is_quantized" not in code and "at::cpu::empty(" in code


def test_ops_without_a_quantized_kernel_pay_no_check(catalog: NativeCatalog, quantized: dict[str, QuantizedOp]) -> None:
    assert "is_quantized" not in definition(catalog, quantized, "aten::add.Tensor")


# --- backends


def test_backends_accept_cmake_lists_and_commas() -> None:
    assert parse_backends("CPU;QuantizedCPU") == BOTH
    assert parse_backends("CPU,QuantizedCPU") == BOTH
    assert parse_backends("CPU") == ("CPU",)


@pytest.mark.parametrize("text, message", [("CUDA", "unknown CUDA"), ("QuantizedCPU", "CPU is required")])
def test_bad_backends_are_refused(text: str, message: str) -> None:
    with pytest.raises(GenerationError, match=message):
        parse_backends(text)


def test_the_report_lists_backend_choices_and_dispatcher_calls(tmp_path: Path) -> None:
    selection = tmp_path / "ops.yaml"
    selection.write_text("- aten::dequantize.self\n- aten::add.Tensor\n- quantized::cat\n- quantized::add\n- aten::size\n")
    assert gen_unboxing.main(["--op-selection-yaml-path", str(selection), "--install-dir", str(tmp_path / "g")]) == 0
    report = json.loads((tmp_path / "g" / "codegen_report.json").read_text())
    assert report["backends"] == ["CPU", "QuantizedCPU"]
    assert report["backend_select"] == ["aten::dequantize.self"]
    assert report["quantized_generated"] == ["quantized::add", "quantized::cat"]
    assert [entry["name"] for entry in report["dispatcher_path"]] == ["quantized::cat"]
    assert report["jit_native"] == ["aten::size"]


# --- classification


def test_quantized_ops_are_not_jit_native(catalog: NativeCatalog) -> None:
    known = known_ops(catalog)
    assert not known.is_jit_native("quantized::conv2d.new")
    assert known.is_non_native_dispatcher_op("quantized::conv2d.new")
    assert known.is_non_native_dispatcher_op("aten::quantized_lstm.input")
    assert known.is_jit_native("aten::size") and not known.is_non_native_dispatcher_op("aten::size")
    assert not known.is_non_native_dispatcher_op("aten::add.Tensor")


def test_the_ops_yaml_marks_each_category() -> None:
    selection = OpSelection((SelectedOp("aten::size"), SelectedOp("quantized::add"), SelectedOp("aten::add.Tensor")))
    text = render_op_selection(selection, frozenset({"aten::size"}), frozenset({"quantized::add"}))
    lines = {line.split(":")[0].strip() + "::" + line.split("::")[1].split(":")[0]: line for line in text.splitlines()
             if line.startswith("  ")}
    assert lines["aten::size"].endswith("# JIT-native")
    assert lines["quantized::add"].endswith(NON_NATIVE_MARK)
    assert lines["aten::add.Tensor"].endswith("}")
