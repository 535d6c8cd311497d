"""The type mapping, table-driven and without a compiler: every schema type in native_functions.yaml
unboxes to a declared C++ local, and call sites that omit arguments get the schema's defaults."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torchgen.model import Return, Type

from tools import gen_unboxing
from tools.cpp_types import check_return_boxable, unbox_argument
from tools.emit_unboxing import emit_unboxing_body
from tools.native_ops import NativeCatalog, load_native_catalog

# (schema type, mutable, kernel parameter type) -> the statements that declare the local `x` from args[0].
UNBOXING_CASES: list[tuple[str, bool, str, tuple[str, ...]]] = [
    ("Tensor", False, "const at::Tensor &", ("const at::Tensor& x = args[0].toTensor();",)),
    ("Tensor", True, "at::Tensor &", ("at::Tensor& x = args[0].toTensor();",)),
    ("Tensor?", False, "const ::std::optional<at::Tensor> &",
     ("const std::optional<at::Tensor> x = to_optional_tensor(args[0]);",)),
    ("Tensor[]", False, "at::TensorList", ("const std::vector<at::Tensor> x = to_tensor_vector(args[0]);",)),
    ("Tensor[]", True, "at::TensorList", ("const std::vector<at::Tensor> x = to_tensor_vector(args[0]);",)),
    ("Tensor?[]", False, "const c10::List<::std::optional<at::Tensor>> &",
     ("const c10::List<std::optional<at::Tensor>> x = optional_tensor_list(args[0]);",)),
    ("int", False, "int64_t", ("const int64_t x = to_int(args[0]);",)),
    ("SymInt", False, "int64_t", ("const int64_t x = to_int(args[0]);",)),
    ("int?", False, "::std::optional<int64_t>", ("const std::optional<int64_t> x = to_optional_int(args[0]);",)),
    ("SymInt?", False, "::std::optional<int64_t>",
     ("const std::optional<int64_t> x = to_optional_int(args[0]);",)),
    ("int[]", False, "at::IntArrayRef", ("const at::DimVector x = to_dim_vector(args[0]);",)),
    ("int[2]", False, "at::IntArrayRef", ("const at::DimVector x = to_dim_vector(args[0]);",)),
    ("SymInt[]", False, "at::IntArrayRef", ("const at::DimVector x = to_dim_vector(args[0]);",)),
    ("int[]?", False, "at::OptionalIntArrayRef",
     ("const std::optional<at::DimVector> x_storage = optional_dim_vector(args[0]);",
      "const at::OptionalIntArrayRef x = optional_array_ref(x_storage);")),
    ("float", False, "double", ("const double x = to_double(args[0]);",)),
    ("float?", False, "::std::optional<double>", ("const std::optional<double> x = to_optional_double(args[0]);",)),
    ("float[]?", False, "::std::optional<at::ArrayRef<double>>",
     ("const std::optional<std::vector<double>> x_storage = optional_double_vector(args[0]);",
      "const std::optional<at::ArrayRef<double>> x = optional_array_ref(x_storage);")),
    ("bool", False, "bool", ("const bool x = to_bool(args[0]);",)),
    ("bool?", False, "::std::optional<bool>", ("const std::optional<bool> x = to_optional_bool(args[0]);",)),
    ("bool[3]", False, "::std::array<bool,3>",
     ("const std::array<bool, 3> x = args[0].to<std::array<bool, 3>>();",)),
    ("str", False, "c10::string_view", ("const std::string_view x = to_string_view(args[0]);",)),
    ("str?", False, "::std::optional<c10::string_view>",
     ("const std::optional<std::string_view> x = to_optional_string_view(args[0]);",)),
    ("Scalar", False, "const at::Scalar &", ("const at::Scalar x = to_scalar(args[0]);",)),
    ("Scalar?", False, "const ::std::optional<at::Scalar> &",
     ("const std::optional<at::Scalar> x = to_optional_scalar(args[0]);",)),
    ("Scalar[]", False, "at::ArrayRef<at::Scalar>",
     ("const std::vector<at::Scalar> x = args[0].to<std::vector<at::Scalar>>();",)),
    ("ScalarType", False, "at::ScalarType", ("const at::ScalarType x = to_scalar_type(args[0]);",)),
    ("ScalarType?", False, "::std::optional<at::ScalarType>",
     ("const std::optional<at::ScalarType> x = to_optional_scalar_type(args[0]);",)),
    ("Layout?", False, "::std::optional<at::Layout>",
     ("const std::optional<at::Layout> x = to_optional_layout(args[0]);",)),
    ("Device?", False, "::std::optional<at::Device>",
     ("const std::optional<at::Device> x = to_optional_device(args[0]);",)),
    ("MemoryFormat?", False, "::std::optional<at::MemoryFormat>",
     ("const std::optional<at::MemoryFormat> x = to_optional_memory_format(args[0]);",)),
    ("Generator?", False, "::std::optional<at::Generator>",
     ("const std::optional<at::Generator> x = args[0].toOptional<at::Generator>();",)),
    ("Storage", False, "at::Storage", ("const at::Storage x = args[0].toStorage();",)),
    ("Stream", False, "at::Stream", ("const at::Stream x = args[0].toStream();",)),
    ("DeviceIndex", False, "at::DeviceIndex",
     ("const c10::DeviceIndex x = static_cast<c10::DeviceIndex>(to_int(args[0]));",)),
]


@pytest.fixture(scope="module")
def catalog() -> NativeCatalog:
    return load_native_catalog()


@pytest.mark.parametrize(("schema_type", "mutable", "cpp_type", "statements"), UNBOXING_CASES,
                         ids=[f"{c[0]}{'!' if c[1] else ''}" for c in UNBOXING_CASES])
def test_unboxing_of(schema_type: str, mutable: bool, cpp_type: str, statements: tuple[str, ...]) -> None:
    unboxed = unbox_argument("x", Type.parse(schema_type), "args[0]", mutable=mutable, cpp_param_type=cpp_type)
    assert unboxed.statements == statements
    assert unboxed.expr == "x"


def test_every_argument_type_in_native_functions_is_covered_by_the_table(catalog: NativeCatalog) -> None:
    seen = {str(a.type) for op in catalog.ops.values() for a in op.function.func.arguments.flat_all}
    # Sized lists other than the ones in the table share their unsized form's mapping.
    normalised = {t.replace("[1]", "[]").replace("[2]", "[]").replace("[3]", "[]").replace("[4]", "[]")
                   .replace("[5]", "[]").replace("[6]", "[]") for t in seen}
    table = {c[0].replace("[2]", "[]").replace("[3]", "[]") for c in UNBOXING_CASES}
    assert normalised - table - {"SymInt[]?", "Device", "Layout", "MemoryFormat"} == set()


@pytest.mark.parametrize("return_type", ["Tensor", "Tensor[]", "bool", "int", "float", "Scalar", "ScalarType",
                                         "QScheme", "SymInt"])
def test_boxable_returns(return_type: str) -> None:
    check_return_boxable(Return(name=None, type=Type.parse(return_type), annotation=None))


def test_tuple_returns_are_pushed_in_order(catalog: NativeCatalog) -> None:
    op = catalog["aten::max.dim"]
    body = emit_unboxing_body(op.function.func, op.kernel)  # type: ignore[arg-type]
    assert "auto results = at::cpu::max(self, dim, keepdim);" in body
    assert body[-3:] == ["drop_arguments(stack, 3);", "push_result(stack, std::get<0>(std::move(results)));",
                         "push_result(stack, std::get<1>(std::move(results)));"]


def test_in_place_returns_its_argument(catalog: NativeCatalog) -> None:
    op = catalog["aten::hardtanh_"]
    body = emit_unboxing_body(op.function.func, op.kernel)  # type: ignore[arg-type]
    assert "at::Tensor& self = args[0].toTensor();" in body
    # replace_arguments takes the result by value: the reference to `self` is copied before the drop.
    assert body[-1] == "replace_arguments(stack, 3, at::cpu::hardtanh_(self, min_val, max_val));"


def test_void_returns_push_nothing(catalog: NativeCatalog) -> None:
    op = catalog["aten::_foreach_add_.Scalar"]
    body = emit_unboxing_body(op.function.func, op.kernel)  # type: ignore[arg-type]
    assert not any("push_result" in line or "replace_arguments" in line for line in body)
    assert body[-1] == "drop_arguments(stack, 2);"


def test_out_arguments_come_last_in_the_kernel_call(catalog: NativeCatalog) -> None:
    op = catalog["aten::sum.IntList_out"]
    body = emit_unboxing_body(op.function.func, op.kernel)  # type: ignore[arg-type]
    assert "replace_arguments(stack, 5, at::cpu::sum_outf(self, dim, keepdim, dtype, out));" in body
    assert "at::Tensor& out = args[4].toTensor();" in body


# Default handling: the runtime fills omitted arguments from the schema string the table carries,
# parsed by the JIT's own schema parser (the same one behind torch._C.parse_schema).
def test_sized_list_default_becomes_a_list(catalog: NativeCatalog) -> None:
    schema = torch._C.parse_schema(catalog["aten::conv2d"].schema)
    defaults = {a.name: a.default_value for a in schema.arguments}
    assert defaults["stride"] == [1, 1] and defaults["padding"] == [0, 0] and defaults["dilation"] == [1, 1]


def test_out_variant_defaults_sit_before_the_out_argument(catalog: NativeCatalog) -> None:
    schema = torch._C.parse_schema(catalog["aten::add.out"].schema)
    names = [a.name for a in schema.arguments]
    assert names == ["self", "other", "alpha", "out"]
    assert schema.arguments[2].default_value == 1
    assert schema.arguments[3].is_out


def test_enum_defaults_parse_to_their_values(catalog: NativeCatalog) -> None:
    schema = torch._C.parse_schema(catalog["aten::mse_loss"].schema)
    assert schema.arguments[2].name == "reduction" and schema.arguments[2].default_value == 1  # Mean


def test_every_schema_in_the_catalog_parses(catalog: NativeCatalog) -> None:
    for op in catalog.ops.values():
        torch._C.parse_schema(op.schema)


def test_all_ops_report(tmp_path: Path) -> None:
    assert gen_unboxing.main(["--all-ops", "--install-dir", str(tmp_path), "--num-shards", "16"]) == 0
    report = json.loads((tmp_path / "codegen_report.json").read_text())
    assert report["native_functions_total"] == 3101
    assert report["reachable_cpu"] == 2911
    assert report["generated"] / report["reachable_cpu"] >= 0.99
    assert len(report["unsupported"]) == report["native_functions_total"] - report["generated"]
    for entry in report["unsupported"]:
        assert entry["reason"].startswith("no CPU or composite kernel (kernels exist only for: ")
    assert report["kernels_by_dispatch_key"] == {
        "CPU": 1067, "CompositeExplicitAutograd": 1050, "CompositeExplicitAutogradNonFunctional": 54,
        "CompositeImplicitAutograd": 740, "custom": 6,
        # native ops with a QuantizedCPU kernel only (q_scale, int_repr, ...), quantized_ops.yaml's method and
        # function entries, and its entries LibTorch exports no entry point for
        "QuantizedCPU": 13, "quantized_ops.yaml": 9, "dispatcher": 22,
    }
    assert len(report["custom_generated"]) == 6
    assert report["reachable_cpu_or_quantized_cpu"] == 2911 + 13
