"""The generator, without a compiler: kernel choice, type mapping, emitted text, incremental output."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tools import gen_unboxing
from tools.cpp_types import UnsupportedType, unbox_argument
from tools.emit_unboxing import emit_kernel_table, shard_of, unboxing_function_name
from tools.gen_unboxing import GenerationError, generate_for_names
from tools.native_ops import NativeCatalog, load_native_catalog
from tools.selection import load_op_selection
from torchgen.model import Type

REPO_ROOT = Path(__file__).resolve().parent.parent
OPS_YAML = REPO_ROOT / "lightweight_dispatch_ops.yaml"

# A call of a per-backend kernel namespace is allowed; any other at:: function call is a dispatcher entry point.
# at::native:: holds the QuantizedCPU kernels native_functions.yaml names (and quantized_add): kernels, not entry points.
KERNEL_NAMESPACES = ("cpu", "compositeexplicitautograd", "compositeexplicitautogradnonfunctional",
                     "compositeimplicitautograd", "native")
DISPATCHER_CALL = re.compile(r"\bat::(?!(?:%s)::)(?:_ops::)?[a-z_][a-z0-9_]*\s*\(" % "|".join(KERNEL_NAMESPACES))


@pytest.fixture(scope="module")
def catalog() -> NativeCatalog:
    return load_native_catalog()


@pytest.fixture(scope="module")
def generated_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("generated")
    assert gen_unboxing.main(["--op-selection-yaml-path", str(OPS_YAML), "--install-dir", str(out)]) == 0
    return out


def test_structured_functional_op_calls_the_cpu_kernel(catalog: NativeCatalog) -> None:
    kernel = catalog["aten::add.Tensor"].kernel
    assert kernel is not None
    assert kernel.qualified_function == "at::cpu::add"
    assert kernel.header == "ATen/ops/add_cpu_dispatch.h"


def test_out_variant_calls_the_out_last_kernel(catalog: NativeCatalog) -> None:
    kernel = catalog["aten::add.out"].kernel
    assert kernel is not None and kernel.qualified_function == "at::cpu::add_outf"
    assert [p.name for p in kernel.parameters] == ["self", "other", "alpha", "out"]


def test_composite_ops_follow_the_static_dispatch_order(catalog: NativeCatalog) -> None:
    assert catalog["aten::convolution"].kernel.dispatch_key == "CompositeExplicitAutograd"  # type: ignore[union-attr]
    assert catalog["aten::conv2d"].kernel.dispatch_key == "CompositeImplicitAutograd"  # type: ignore[union-attr]


def test_tensor_options_are_passed_scattered(catalog: NativeCatalog) -> None:
    kernel = catalog["aten::empty.memory_format"].kernel
    assert kernel is not None
    assert [p.name for p in kernel.parameters] == ["size", "dtype", "layout", "device", "pin_memory", "memory_format"]


def test_cuda_only_op_is_unsupported_with_reason(catalog: NativeCatalog) -> None:
    op = catalog["aten::_cudnn_rnn"]
    assert op.kernel is None
    assert "no CPU or composite kernel" in (op.unsupported_reason or "")


def test_sized_int_list_is_read_into_a_dim_vector() -> None:
    unboxed = unbox_argument("stride", Type.parse("SymInt[2]"), "args[3]", mutable=False, cpp_param_type="at::IntArrayRef")
    assert unboxed.statements == ("const at::DimVector stride = to_dim_vector(args[3]);",)


def test_mutable_tensor_is_bound_by_non_const_reference() -> None:
    unboxed = unbox_argument("self", Type.parse("Tensor"), "args[0]", mutable=True, cpp_param_type="at::Tensor &")
    assert unboxed.statements == ("at::Tensor& self = args[0].toTensor();",)


def test_optional_int_list_keeps_storage_alive() -> None:
    unboxed = unbox_argument(
        "output_size", Type.parse("SymInt[]?"), "args[1]", mutable=False, cpp_param_type="at::OptionalIntArrayRef"
    )
    assert unboxed.statements[0].startswith("const std::optional<at::DimVector> output_size_storage")
    assert "optional_array_ref(output_size_storage)" in unboxed.statements[1]


def test_tensor_list_uses_the_ivalue_list_for_itensorlistref() -> None:
    unboxed = unbox_argument(
        "tensors", Type.parse("Tensor[]"), "args[0]", mutable=False, cpp_param_type="const at::ITensorListRef &"
    )
    assert unboxed.statements == ("const c10::List<at::Tensor> tensors = to_tensor_list(args[0]);",)


def test_unknown_type_is_reported_not_guessed() -> None:
    with pytest.raises(UnsupportedType, match="no unboxing"):
        unbox_argument("x", Type.parse("GraphModule"), "args[0]", mutable=False, cpp_param_type="")


def test_generated_code_calls_no_dispatcher_entry_point(generated_dir: Path) -> None:
    sources = [p.read_text() for p in sorted(generated_dir.glob("UnboxingShard_*.cpp"))]
    code = "\n".join(line for text in sources for line in text.splitlines() if not line.lstrip().startswith("//"))
    assert DISPATCHER_CALL.findall(code) == []
    for forbidden in ("callBoxed", "Dispatcher", "findSchema", "typed<"):
        assert forbidden not in code
    assert "at::cpu::add(self, other, alpha)" in code
    # The one exception: operators LibTorch exports no entry point for, each listed with its reason.
    report = json.loads((generated_dir / "codegen_report.json").read_text())
    listed = {entry["name"] for entry in report["dispatcher_path"]}
    found = set(re.findall(r'find_dispatcher_operator\("([^"]+)", "([^"]*)"\)', code))
    assert {f"{name}.{overload}" if overload else name for name, overload in found} == listed
    assert all(entry["reason"] for entry in report["dispatcher_path"])


def test_dispatcher_pattern_would_catch_an_entry_point() -> None:
    # Guards the guard: the pattern above must flag at::add(...) and at::_ops::add_Tensor::call(...).
    assert DISPATCHER_CALL.findall("auto r = at::add(self, other);")
    assert not DISPATCHER_CALL.findall("auto r = at::cpu::add(self, other);")


def test_every_selected_native_op_is_generated(generated_dir: Path) -> None:
    report = json.loads((generated_dir / "codegen_report.json").read_text())
    assert report["unsupported"] == []
    assert {"aten::size", "aten::len.t", "aten::gt.int"} <= set(report["jit_native"])
    table = (generated_dir / "KernelTable.cpp").read_text()
    selected = load_op_selection(OPS_YAML).names
    catalog = load_native_catalog()
    native = {name for name in selected if name in catalog}
    assert report["generated"] == len(native)
    for name in native:
        assert f'"{name}"' in table
    assert set(report["jit_native"]).isdisjoint(native)


def test_rerunning_the_generator_rewrites_nothing(generated_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = {p.name: p.stat().st_mtime_ns for p in generated_dir.iterdir()}
    assert gen_unboxing.main(["--op-selection-yaml-path", str(OPS_YAML), "--install-dir", str(generated_dir)]) == 0
    assert " 0 of " in capsys.readouterr().out
    assert {p.name: p.stat().st_mtime_ns for p in generated_dir.iterdir()} == before


def test_one_op_change_touches_one_shard_and_the_table(catalog: NativeCatalog) -> None:
    jit_ops = frozenset({"aten::size"})
    base = ["aten::add.Tensor", "aten::conv2d", "aten::linear"]
    before = gen_unboxing.render_outputs(generate_for_names(catalog, base, jit_ops), 4, "ops.yaml")
    after = gen_unboxing.render_outputs(generate_for_names(catalog, base + ["aten::relu"], jit_ops), 4, "ops.yaml")
    changed = sorted(name for name in before if before[name] != after[name])
    assert changed == sorted(["KernelTable.cpp", f"UnboxingShard_{shard_of('aten::relu', 4)}.cpp"])


def test_unknown_operator_is_an_error_naming_it(catalog: NativeCatalog) -> None:
    with pytest.raises(GenerationError, match="aten::no_such_op"):
        generate_for_names(catalog, ["aten::add.Tensor", "aten::no_such_op"], frozenset())


def test_function_names_are_valid_identifiers() -> None:
    assert unboxing_function_name("aten::add.Tensor") == "aten_add_Tensor"
    assert unboxing_function_name("aten::hardtanh_") == "aten_hardtanh_"


def test_empty_selection_yields_a_compilable_empty_table() -> None:
    table = emit_kernel_table([], "empty.yaml")
    assert "return {};" in table
