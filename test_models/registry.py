"""The table of named test models. Adding a model means adding one `ModelSpec` here."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Union

import torch

from test_models import (
    arithmetic,
    detection_ops,
    differential_ops,
    indexing,
    list_ops,
    micro_add_loop,
    micro_op_chain,
    micro_postprocess,
    mobilenet_v2,
    out_variants,
    quantized_detection_head,
    quantized_lstm,
    quantized_mobilenet_v2,
    random_draws,
    recurrent,
    resize_conv,
    roi_head,
    small_efficientnet,
    small_resnet,
    ssdlite_head,
    tensor_creation,
    transformer,
    typed_arguments,
)

# One argument of a model's forward, as torch.save stores it and lite_predictor reads it: a tensor, a number,
# a string, None, or a list, tuple or dict of them.
ForwardArgument = Union[
    torch.Tensor, int, float, bool, str, None,
    "list[ForwardArgument]", "tuple[ForwardArgument, ...]", "dict[str, ForwardArgument]",
]


@dataclass(frozen=True)
class ModelSpec:
    """How to build one test model and the inputs it is checked on."""

    name: str
    build: Callable[[], torch.nn.Module]
    # forward's leading arguments; trailing defaulted ones may be left out.
    example_inputs: Callable[[], tuple[ForwardArgument, ...]]
    # torch.jit.freeze folds conv + batch norm; a deployed model would be frozen too.
    freeze: bool = True
    # A quantized model's quantized engine (torch.backends.quantized.engine): its weights are packed, its
    # reference outputs computed and it is exported under this engine. None for float models.
    qengine: str | None = None


MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec("mobilenet_v2", mobilenet_v2.build, mobilenet_v2.example_inputs),
        # Saved unfrozen, as users save scripted models (weights read as attributes, batch norms after convs):
        # the bind-time stage freezes them (bind_time/attribute_freezing.h).
        ModelSpec("mobilenet_v2_unfrozen", mobilenet_v2.build, mobilenet_v2.example_inputs, freeze=False),
        ModelSpec("small_resnet_unfrozen", small_resnet.build, small_resnet.example_inputs, freeze=False),
        ModelSpec("small_resnet", small_resnet.build, small_resnet.example_inputs),
        # Activations fused into the conv or linear before them: SiLU, sigmoid, hardswish, GELU, tanh, add + ReLU.
        ModelSpec("small_efficientnet", small_efficientnet.build, small_efficientnet.example_inputs),
        ModelSpec("small_efficientnet_unfrozen", small_efficientnet.build, small_efficientnet.example_inputs,
                  freeze=False),
        # Type coverage: each exercises a family of schema argument and return types end to end.
        ModelSpec("tensor_creation", tensor_creation.build, tensor_creation.example_inputs),
        ModelSpec("indexing", indexing.build, indexing.example_inputs),
        ModelSpec("resize_conv", resize_conv.build, resize_conv.example_inputs),
        ModelSpec("arithmetic", arithmetic.build, arithmetic.example_inputs),
        ModelSpec("list_ops", list_ops.build, list_ops.example_inputs),
        ModelSpec("recurrent", recurrent.build, recurrent.example_inputs),
        ModelSpec("transformer", transformer.build, transformer.example_inputs),
        ModelSpec("out_variants", out_variants.build, out_variants.example_inputs),
        # Random-number operators without a Generator argument: the bind-time stage must neither fold them nor
        # prepare with a hidden run.
        ModelSpec("random_draws", random_draws.build, random_draws.example_inputs),
        # The in-place and other operators tests/differential_models.py's generated models call.
        ModelSpec("differential_ops", differential_ops.build, differential_ops.example_inputs),
        # Every kind of forward argument (ints, floats, bools, lists, optionals, dicts; defaults), RAFT-shaped.
        ModelSpec("typed_arguments", typed_arguments.build, typed_arguments.example_inputs),
        # Detection: torchvision's ops (custom_ops.yaml) with the post-processing around them.
        ModelSpec("ssdlite_head", ssdlite_head.build, ssdlite_head.example_inputs),
        # The same head's convolutional part alone, and a larger head (MobileNetV2's 96 and 1280 channels, 91
        # classes) with and without its post-processing: the latency benchmark's detection models.
        ModelSpec("ssdlite_head_convs", ssdlite_head.build_convs, ssdlite_head.example_inputs),
        ModelSpec("ssdlite_large_head", ssdlite_head.build_large, ssdlite_head.example_inputs_large),
        ModelSpec("ssdlite_large_head_convs", ssdlite_head.build_large_convs, ssdlite_head.example_inputs_large),
        ModelSpec("roi_head", roi_head.build, roi_head.example_inputs),
        ModelSpec("detection_ops", detection_ops.build, detection_ops.example_inputs),
        # Quantized (torch.ao.quantization's eager-mode workflow), under the wheel's default engine, x86.
        ModelSpec("quantized_mobilenet_v2", quantized_mobilenet_v2.build, quantized_mobilenet_v2.example_inputs,
                  qengine=quantized_mobilenet_v2.QENGINE),
        ModelSpec("quantized_detection_head", quantized_detection_head.build,
                  quantized_detection_head.example_inputs, qengine=quantized_detection_head.QENGINE),
        # Unfrozen, as saved straight from a script: at load its convs' __setstate__ calls
        # quantized::conv2d_prepack to rebuild their packed weights.
        ModelSpec("quantized_detection_head_unfrozen", quantized_detection_head.build,
                  quantized_detection_head.example_inputs, freeze=False, qengine=quantized_detection_head.QENGINE),
        ModelSpec("quantized_lstm", quantized_lstm.build, quantized_lstm.example_inputs,
                  qengine=quantized_lstm.QENGINE),
        # Per-op overhead micro benchmarks (benchmarks/): loops of tiny ops. Not frozen: freezing unrolls loops.
        ModelSpec("micro_add_loop", micro_add_loop.build, micro_add_loop.example_inputs, freeze=False),
        ModelSpec("micro_op_chain", micro_op_chain.build, micro_op_chain.example_inputs, freeze=False),
        ModelSpec("micro_postprocess", micro_postprocess.build, micro_postprocess.example_inputs, freeze=False),
    )
}


def model_names() -> list[str]:
    return sorted(MODELS)


def get_model(name: str) -> ModelSpec:
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(f"unknown test model {name!r}; registered models: {', '.join(model_names())}") from None
