"""The type-coverage test models survive export, and keep calling the operators whose schema types they cover.

Each model is run three ways on its example inputs, all with grad mode off as a deployed model runs:
eagerly, scripted and frozen, and saved and reloaded for the lite interpreter. The operators each lite module
calls are printed (run pytest with -s to see them) and must include the ones the model exists to exercise,
so a refactor of a model that stops reaching a schema type fails here rather than silently shrinking
what the codegen is tested on.
"""
from __future__ import annotations

import io
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest
import torch
from torch.jit.mobile import _export_operator_list, _get_model_ops_and_info, _load_for_lite_interpreter

from test_models import arithmetic, indexing, list_ops, recurrent, resize_conv, tensor_creation, transformer

MODELS: dict[str, ModuleType] = {
    "tensor_creation": tensor_creation,
    "indexing": indexing,
    "resize_conv": resize_conv,
    "arithmetic": arithmetic,
    "list_ops": list_ops,
    "recurrent": recurrent,
    "transformer": transformer,
}

# The operators each model is meant to exercise (a subset of what it calls), with the schema types they cover.
EXERCISED_OPS: dict[str, frozenset[str]] = {
    # ScalarType?, Layout?, Device?, bool? pin_memory; Scalar fill values; the TorchScript list literal.
    "tensor_creation": frozenset({
        "aten::zeros", "aten::ones", "aten::full", "aten::arange.start_step", "aten::empty.memory_format",
        "aten::fill_.Scalar", "aten::eye.m", "aten::zeros_like", "aten::ones_like", "aten::full_like",
        "aten::to.dtype", "aten::tensor",
    }),
    # Tensor?[] (index_put_, index.Tensor), Tensor[] (index_put_.hacked_twin), Scalar values.
    "indexing": frozenset({
        "aten::index_put_", "aten::index_put_.hacked_twin", "aten::index.Tensor", "aten::index_select",
        "aten::gather", "aten::scatter_.src", "aten::scatter_.value", "aten::masked_fill.Scalar",
        "aten::where.self",
    }),
    # SymInt[]? / float[]? sizes, int[2] with defaults omitted, str padding.
    "resize_conv": frozenset({
        "aten::upsample_nearest2d.vec", "aten::upsample_bilinear2d.vec", "aten::conv2d", "aten::conv2d.padding",
        "aten::max_pool2d", "aten::avg_pool2d",
    }),
    # Scalar alpha, str? rounding_mode, out= tensors, Scalar? and Tensor? bounds, numbers out of tensors.
    "arithmetic": frozenset({
        "aten::add.Tensor", "aten::sub.Tensor", "aten::rsub.Scalar", "aten::add.Scalar", "aten::mul.Scalar",
        "aten::div.Tensor", "aten::div.Tensor_mode", "aten::div.out", "aten::div.out_mode",
        "aten::pow.Tensor_Tensor", "aten::pow.Tensor_Scalar", "aten::clamp", "aten::clamp.Tensor",
        "aten::item", "aten::Float.Tensor", "aten::Int.Tensor", "aten::Bool.Tensor", "aten::where.self",
        "aten::gt.Tensor", "aten::le.Tensor", "aten::numel",
    }),
    # Tensor[] arguments and returns, int[] split sizes, (Tensor, Tensor) returns.
    "list_ops": frozenset({
        "aten::cat", "aten::stack", "aten::topk", "aten::max.dim", "aten::min.dim", "aten::sort",
        "aten::unbind.int", "aten::split.Tensor", "aten::split.sizes", "aten::chunk", "aten::meshgrid.indexing",
        "aten::broadcast_tensors",
    }),
    # Tensor[] hidden states and weights, tuple returns.
    "recurrent": frozenset({"aten::lstm.input", "aten::gru.input"}),
    # Both paths of the encoder layer; the bool padding mask is built with arange and ge.
    "transformer": frozenset({
        "aten::_transformer_encoder_layer_fwd", "aten::scaled_dot_product_attention", "aten::layer_norm",
        "aten::linear", "aten::arange", "aten::ge.Tensor",
    }),
}

# Ops resize_conv calls with trailing arguments left at their schema defaults.
DEFAULTED_OPS = ("aten::conv2d", "aten::max_pool2d", "aten::avg_pool2d")
ATOL = 1e-5


@dataclass(frozen=True)
class ExportedModel:
    """One test model as built, scripted and frozen, and reloaded from its lite-interpreter bytes."""

    name: str
    inputs: tuple[torch.Tensor, ...]
    eager: torch.nn.Module
    frozen: torch.jit.ScriptModule
    lite_bytes: bytes
    lite: torch.jit.mobile.LiteScriptModule
    ops: frozenset[str]


def export(name: str) -> ExportedModel:
    module = MODELS[name]
    eager = module.build()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TorchScript and the lite interpreter warn they are deprecated
        frozen = torch.jit.freeze(torch.jit.script(eager))
        lite_bytes = frozen._save_to_buffer_for_lite_interpreter()
        lite = _load_for_lite_interpreter(io.BytesIO(lite_bytes))
    ops = frozenset(_export_operator_list(lite))
    return ExportedModel(name, module.example_inputs(), eager, frozen, lite_bytes, lite, ops)


@pytest.fixture(scope="module", params=sorted(MODELS))
def exported(request: pytest.FixtureRequest) -> ExportedModel:
    return export(request.param)


def run(model: object, inputs: tuple[torch.Tensor, ...]) -> object:
    with torch.no_grad():
        return model(*inputs)


def test_frozen_torchscript_matches_eager(exported: ExportedModel) -> None:
    expected = run(exported.eager, exported.inputs)
    torch.testing.assert_close(run(exported.frozen, exported.inputs), expected, atol=ATOL, rtol=ATOL)


def test_lite_interpreter_matches_eager(exported: ExportedModel) -> None:
    expected = run(exported.eager, exported.inputs)
    torch.testing.assert_close(run(exported.lite, exported.inputs), expected, atol=ATOL, rtol=ATOL)


def test_model_calls_the_operators_it_exercises(exported: ExportedModel) -> None:
    print(f"\n{exported.name}: {len(exported.ops)} operators\n  " + "\n  ".join(sorted(exported.ops)))
    missing = EXERCISED_OPS[exported.name] - exported.ops
    assert not missing, (
        f"test_models/{exported.name}.py no longer calls {sorted(missing)}; "
        "restore the calls or update EXERCISED_OPS if a torch upgrade renamed them"
    )


def test_every_model_declares_the_operators_it_exercises() -> None:
    assert sorted(EXERCISED_OPS) == sorted(MODELS)


def test_resize_conv_leaves_trailing_defaults_to_the_interpreter(tmp_path: Path) -> None:
    # The bytecode stores how many arguments a call site passes; trailing ones equal to their schema
    # default are dropped, and the runtime must supply them.
    path = tmp_path / "resize_conv.ptl"
    path.write_bytes(export("resize_conv").lite_bytes)
    stored = _get_model_ops_and_info(str(path))
    for op in DEFAULTED_OPS:
        name, _, overload = op.partition(".")
        schema = next(s for s in torch._C._jit_get_schemas_for_operator(name) if s.overload_name == overload)
        assert stored[op].num_schema_args < len(schema.arguments), f"{op} is stored with all its arguments"


def test_transformer_decomposed_path_matches_eager_fast_path() -> None:
    # With grad mode on, the lite module takes the decomposed attention path; eager without grad takes
    # the fused aten::_transformer_encoder_layer_fwd. Both must give the same answer.
    model = export("transformer")
    fast = run(model.eager, model.inputs)
    with torch.enable_grad():
        decomposed = model.lite(*model.inputs)
    torch.testing.assert_close(decomposed, fast, atol=ATOL, rtol=ATOL)
