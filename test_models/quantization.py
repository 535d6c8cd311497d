"""PyTorch's documented eager-mode quantization workflow, shared by the quantized test models.

Static quantization (torch.ao.quantization): the float model marks where tensors enter and leave the
quantized domain with QuantStub / DeQuantStub, fuses conv + bn (+ relu), gets the engine's default qconfig,
is prepared (observers inserted), calibrated on seeded random batches and converted (observers replaced by
quantized modules, weights quantized and packed for the current engine).

A quantized engine decides how weights are packed (at convert and again when a scripted model's
`__setstate__` rebuilds them at load) and which kernels run, so every step from building a model to
exporting it happens under one engine: `quantized_engine(...)`.
"""
from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn
from torch.ao import quantization

# The wheel's default engine on x86 CPUs (fbgemm where it is best, oneDNN elsewhere): what a model built
# here without choosing an engine gets, and what lite_predictor runs without --qengine.
DEFAULT_ENGINE = "x86"

# What the documented workflow itself warns about in torch 2.13: torch.ao.quantization, the default qconfigs'
# reduce_range and the quantized dtypes are deprecated, and a FloatFunctional on a branch the calibration never
# took (as in torchvision's quantizable MobileNetV2, whose blocks without a residual still own one) has no
# statistics.
WORKFLOW_WARNINGS = (
    "torch.ao.quantization is deprecated",
    "Please use quant_min and quant_max",
    "torch.quantize_per_tensor, torch.quantize_per_channel",
    "must run observer before calling calculate_qparams",
)


@contextmanager
def quantized_engine(engine: str) -> Iterator[None]:
    """Run the block with `torch.backends.quantized.engine = engine`, restoring the previous engine after."""
    supported = torch.backends.quantized.supported_engines
    if engine not in supported:
        raise ValueError(f"quantized engine {engine!r} is not in this torch build; supported: {', '.join(supported)}")
    previous = torch.backends.quantized.engine
    torch.backends.quantized.engine = engine
    try:
        yield
    finally:
        torch.backends.quantized.engine = previous


@contextmanager
def quiet_workflow() -> Iterator[None]:
    """The block without the workflow's own deprecation and calibration warnings (WORKFLOW_WARNINGS)."""
    with warnings.catch_warnings():
        for message in WORKFLOW_WARNINGS:
            warnings.filterwarnings("ignore", message=message)
        yield


def quantize_static(
    model: nn.Module,
    fuse: Callable[[nn.Module], None],
    calibration: Iterable[tuple[Tensor, ...]],
    engine: str,
) -> nn.Module:
    """`model` (float, with Quant/DeQuantStubs) fused, calibrated on `calibration` and converted, in place.

    Packs the weights for the current engine, so that must be `engine`: call it under `quantized_engine(engine)`."""
    current = torch.backends.quantized.engine
    if current != engine:
        raise ValueError(
            f"quantizing {type(model).__name__} for {engine!r} while the quantized engine is {current!r}: "
            f"build it under test_models.quantization.quantized_engine({engine!r})"
        )
    model.eval()
    fuse(model)
    with quiet_workflow():
        model.qconfig = quantization.get_default_qconfig(engine)
        quantization.prepare(model, inplace=True)
        with torch.no_grad():
            for batch in calibration:
                model(*batch)
        quantization.convert(model, inplace=True)
    return model


def seeded_batches(shapes: tuple[tuple[int, ...], ...], count: int, seed: int) -> list[tuple[Tensor, ...]]:
    """`count` calibration batches, each one tensor per shape, uniform in [0, 1) from `seed`."""
    generator = torch.Generator().manual_seed(seed)
    return [tuple(torch.rand(*shape, generator=generator) for shape in shapes) for _ in range(count)]


def dequantized_scales(model: nn.Module, inputs: tuple[Tensor, ...]) -> list[float]:
    """The scale of every quantized tensor a converted model's DeQuantize modules turn into floats on `inputs`,
    in call order: one quantization step of each output that leaves the quantized domain."""
    scales: list[float] = []

    def record(_module: nn.Module, args: tuple[Tensor, ...]) -> None:
        scales.append(float(args[0].q_scale()))

    dequantizers = [m for m in model.modules() if isinstance(m, nn.quantized.DeQuantize)]
    if not dequantizers:
        raise ValueError(f"{type(model).__name__} has no DeQuantize module: is it a converted quantized model?")
    handles = [m.register_forward_pre_hook(record) for m in dequantizers]
    try:
        with torch.no_grad():
            model(*inputs)
    finally:
        for handle in handles:
            handle.remove()
    return scales
