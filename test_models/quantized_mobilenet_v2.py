"""MobileNetV2 quantized by eager-mode static quantization, as torchvision's quantizable MobileNetV2 is.

The architecture is test_models/mobilenet_v2.py's (width 1.0, 224x224, 1000 classes) with torchvision's
changes for quantization: ReLU instead of ReLU6, so that conv + bn + relu fuse into one quantized
conv2d_relu; the residual add through `FloatFunctional`, which becomes `quantized::add`; a QuantStub in
front and a DeQuantStub after the classifier, whose linear is quantized too. Global pooling and flatten run
on the quantized tensor.

Weights are random from a fixed seed (as mobilenet_v2.py's), calibrated on seeded random images with the
engine's default qconfig (histogram observers for activations, per-channel weights) and converted.
Output: the dequantized logits [1, 1000], multiples of one quantization step, `output_scale()`.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.ao.quantization import DeQuantStub, QuantStub, fuse_modules

from test_models.mobilenet_v2 import INVERTED_RESIDUAL_SETTINGS, _make_divisible
from test_models.quantization import (
    DEFAULT_ENGINE,
    dequantized_scales,
    quantize_static,
    quantized_engine,
    seeded_batches,
)

SEED = 0
QENGINE = DEFAULT_ENGINE
IMAGE_SHAPE = (1, 3, 224, 224)
CALIBRATION_BATCHES = 4


class ConvBNReLU(nn.Sequential):
    def __init__(self, in_ch: int, out_ch: int, kernel: int = 3, stride: int = 1, groups: int = 1) -> None:
        super().__init__(
            nn.Conv2d(in_ch, out_ch, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
            nn.BatchNorm2d(out_ch),
            nn.ReLU(inplace=True),
        )

    def fuse(self) -> None:
        fuse_modules(self, ["0", "1", "2"], inplace=True)


class QuantizableInvertedResidual(nn.Module):
    def __init__(self, in_ch: int, out_ch: int, stride: int, expand_ratio: int) -> None:
        super().__init__()
        hidden = int(round(in_ch * expand_ratio))
        self.use_residual = stride == 1 and in_ch == out_ch
        layers: list[nn.Module] = []
        if expand_ratio != 1:
            layers.append(ConvBNReLU(in_ch, hidden, kernel=1))
        layers += [
            ConvBNReLU(hidden, hidden, stride=stride, groups=hidden),  # depthwise
            nn.Conv2d(hidden, out_ch, 1, bias=False),  # linear bottleneck
            nn.BatchNorm2d(out_ch),
        ]
        self.conv = nn.Sequential(*layers)
        self.skip_add = nn.quantized.FloatFunctional()

    def forward(self, x: Tensor) -> Tensor:
        if self.use_residual:
            return self.skip_add.add(x, self.conv(x))
        return self.conv(x)

    def fuse(self) -> None:
        last = len(self.conv) - 2  # the bottleneck conv and its batch norm
        fuse_modules(self.conv, [str(last), str(last + 1)], inplace=True)


class QuantizableMobileNetV2(nn.Module):
    def __init__(self, num_classes: int = 1000, width_mult: float = 1.0, dropout: float = 0.2) -> None:
        super().__init__()
        in_ch = _make_divisible(32 * width_mult)
        last_ch = _make_divisible(1280 * max(1.0, width_mult))
        features: list[nn.Module] = [ConvBNReLU(3, in_ch, stride=2)]
        for t, c, n, s in INVERTED_RESIDUAL_SETTINGS:
            out_ch = _make_divisible(c * width_mult)
            for i in range(n):
                features.append(QuantizableInvertedResidual(in_ch, out_ch, s if i == 0 else 1, t))
                in_ch = out_ch
        features.append(ConvBNReLU(in_ch, last_ch, kernel=1))
        self.quant = QuantStub()
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(dropout), nn.Linear(last_ch, num_classes))
        self.dequant = DeQuantStub()
        self._init_weights()

    def _init_weights(self) -> None:
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
            elif isinstance(m, nn.BatchNorm2d):
                # Non-trivial statistics so that fusing batch norm into conv is exercised.
                nn.init.uniform_(m.weight, 0.5, 1.5)
                nn.init.uniform_(m.bias, -0.1, 0.1)
                nn.init.uniform_(m.running_mean, -0.1, 0.1)
                nn.init.uniform_(m.running_var, 0.5, 1.5)
            elif isinstance(m, nn.Linear):
                # Wider than mobilenet_v2.py's 0.01 so that the quantized logits span many steps.
                nn.init.normal_(m.weight, 0, 0.05)
                nn.init.uniform_(m.bias, -0.1, 0.1)

    def forward(self, x: Tensor) -> Tensor:
        x = self.quant(x)
        x = self.features(x)
        x = nn.functional.adaptive_avg_pool2d(x, 1)
        x = torch.flatten(x, 1)
        x = self.classifier(x)
        return self.dequant(x)

    def fuse(self) -> None:
        for m in list(self.modules()):  # fusing replaces children: walk a snapshot
            if isinstance(m, (ConvBNReLU, QuantizableInvertedResidual)):
                m.fuse()


def build() -> nn.Module:
    """The converted model, its weights packed for the current quantized engine."""
    torch.manual_seed(SEED)
    model = QuantizableMobileNetV2()
    calibration = seeded_batches((IMAGE_SHAPE,), CALIBRATION_BATCHES, SEED + 2)
    return quantize_static(model, QuantizableMobileNetV2.fuse, calibration, QENGINE)


def example_inputs() -> tuple[Tensor, ...]:
    generator = torch.Generator().manual_seed(SEED + 1)
    return (torch.rand(*IMAGE_SHAPE, generator=generator),)


def output_scale() -> float:
    """One quantization step of the logits (the scale of the classifier's quantized output)."""
    with quantized_engine(QENGINE):
        (scale,) = dequantized_scales(build(), example_inputs())
    return scale
