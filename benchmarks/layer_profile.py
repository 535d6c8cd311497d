"""Where the time goes, per kind of layer: lite_predictor's --profile-ops beside ONNX Runtime's own profile of
the same model (benchmarks/ort_layer_profile.py, run in the peers' environment), both at 1 thread.

Each runtime names its operators its own way, and fuses differently (our convs carry their activation; ORT's
NCHWc convs carry theirs too, but ORT runs SiLU apart, as QuickGelu), so the operators are summed into kinds of
layer: convolution (with whatever it fused), linear / matmul, attention, normalisation, pooling, elementwise,
layout (reorders, reshapes, transposes, copies), other. The figures are each profile's own per-call timer:
they add up to more than an untimed run, and are for finding the kind of layer where one runtime spends
more, not for the ratio targets (those come from the interleaved runs).
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

KINDS = ("convolution", "linear / matmul", "attention", "normalisation", "pooling", "elementwise", "layout", "other")

# Operator names (ours without the namespace and overload, as --profile-ops gives them; ORT's op types), per kind.
_OURS = {
    "convolution": {"conv2d", "convolution", "_convolution", "quantized::conv2d", "quantized::conv2d_relu"},
    "linear / matmul": {"linear", "matmul", "addmm", "mm", "bmm", "quantized::linear", "quantized::linear_relu"},
    "attention": {"scaled_dot_product_attention", "_native_multi_head_attention"},
    "normalisation": {"layer_norm", "batch_norm", "softmax", "group_norm"},
    "pooling": {"max_pool2d", "adaptive_avg_pool2d", "avg_pool2d", "mean"},
    "elementwise": {"add", "add_", "mul", "mul_", "sub", "div", "relu", "relu_", "hardtanh", "hardtanh_", "silu",
                    "silu_", "sigmoid", "sigmoid_", "hardswish", "hardswish_", "hardsigmoid", "gelu", "tanh",
                    "quantized::add", "quantized::add_relu", "quantized::mul", "quantized::hardswish"},
    "layout": {"flatten", "reshape", "view", "transpose", "permute", "contiguous", "chunk", "cat", "quantize_per_tensor",
               "dequantize", "to", "expand", "slice", "select", "unsqueeze", "squeeze", "index"},
}
_ORT = {
    "convolution": {"Conv", "FusedConv", "QLinearConv", "ConvInteger"},
    "linear / matmul": {"Gemm", "MatMul", "FusedMatMul", "FusedGemm", "QLinearMatMul", "MatMulInteger",
                        "DynamicQuantizeMatMul", "MatMulIntegerToFloat"},
    "attention": {"Attention", "MultiHeadAttention"},
    "normalisation": {"LayerNormalization", "SkipLayerNormalization", "SimplifiedLayerNormalization",
                      "BatchNormalization", "Softmax"},
    "pooling": {"MaxPool", "GlobalAveragePool", "AveragePool", "GlobalMaxPool", "ReduceMean", "QLinearGlobalAveragePool"},
    "elementwise": {"Add", "Mul", "Sub", "Div", "Relu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "QuickGelu",
                    "Gelu", "FastGelu", "BiasGelu", "Tanh", "Erf", "Pow", "Sqrt", "QLinearAdd", "QLinearMul",
                    "QLinearSigmoid", "Where", "Equal", "Not", "Cast"},
    "layout": {"ReorderInput", "ReorderOutput", "Reshape", "Flatten", "Transpose", "Concat", "Split", "Slice",
               "Gather", "Unsqueeze", "Squeeze", "Shape", "Expand", "QuantizeLinear", "DequantizeLinear",
               "Identity", "Range", "ConstantOfShape"},
}


def kind_of(op: str, names: dict[str, set[str]]) -> str:
    """The kind of layer an operator belongs to (ORT's NCHWc ops are named like the standard ones)."""
    short = op.split("::", 1)[1] if op.startswith("aten::") else op
    short = short.split(".", 1)[0]
    for kind, members in names.items():
        if short in members or op in members:
            return kind
    return "other"


def by_kind(ms_per_op: dict[str, float], names: dict[str, set[str]]) -> dict[str, float]:
    totals = {kind: 0.0 for kind in KINDS}
    for op, ms in ms_per_op.items():
        totals[kind_of(op, names)] += ms
    return totals


def profile_ops(predictor: Path, model: Path, inputs: Path, runs: int, *options: str) -> dict[str, float]:
    """lite_predictor --profile-ops: ms per run of each operator, 1 thread (the bind-time stage on unless
    `options` say --no-specialize)."""
    done = subprocess.run([str(predictor), str(model), "--input", str(inputs), "--threads", "1", "--iters", str(runs),
                           "--profile-ops", "--json", *options], capture_output=True, text=True, timeout=600,
                          check=False)
    if done.returncode not in (0, 1):  # 1: outputs differ, which the steady runs report
        raise RuntimeError(f"lite_predictor --profile-ops failed ({done.returncode}): {done.stderr.strip()[:300]}")
    return {op["op"]: op["ms_per_run"] for op in json.loads(done.stdout)["op_profile"]["ops"]}


def ours(predictor: Path, model: Path, inputs: Path, runs: int) -> dict[str, float]:
    """--profile-ops per kind of layer (ms per run), 1 thread, the bind-time stage on."""
    return by_kind(profile_ops(predictor, model, inputs, runs), _OURS)


# Operators the stage compiles into partitions (their time with the stage is the partition's).
COMPILED = ("aten::conv2d", "aten::linear")
# Slower beyond noise: by more than a quarter, and by more than 0.05 ms per run (per-call timers at 1 thread
# move by ~10% between runs; a few microseconds of a tiny operator are not a layout).
SLOWER_RATIO, SLOWER_MS = 1.25, 0.05


def slower_outside_partitions(stage: dict[str, float], no_stage: dict[str, float]) -> dict[str, tuple[float, float]]:
    """Operators outside the compiled partitions that take longer with the stage than without it, beyond noise
    (issue 21's item 3: no operator handed a layout it runs slowly on): {op: (with, without) ms per run}."""
    return {op: (ms, no_stage[op]) for op, ms in stage.items()
            if op not in COMPILED and op in no_stage and ms > no_stage[op] * SLOWER_RATIO and ms - no_stage[op] > SLOWER_MS}


def onnxruntime(peers_python: Path, onnx: Path, inputs: Path, runs: int) -> dict[str, float]:
    done = subprocess.run([str(peers_python), "-m", "benchmarks.ort_layer_profile", "--onnx", str(onnx), "--inputs",
                           str(inputs), "--runs", str(runs)], capture_output=True, text=True, timeout=600, check=False,
                          cwd=Path(__file__).resolve().parent.parent)
    if done.returncode != 0:
        raise RuntimeError(f"ORT's profile failed: {done.stderr.strip()[-300:]}")
    return by_kind(json.loads(done.stdout)["ms_per_run"], _ORT)
