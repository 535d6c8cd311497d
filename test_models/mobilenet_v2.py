"""MobileNetV2 (Sandler et al., 2018) in plain torch.nn: width 1.0, 224x224 input, 1000 classes.

torchvision does not import beside the pinned torch wheel, so the architecture is written out here:
a 3x3 stem, seventeen inverted-residual blocks, a 1x1 conv to 1280 channels, global pooling and a
dropout + linear classifier. Weights are random from a fixed seed; the model is used in eval mode.
"""
from __future__ import annotations

import torch
from torch import nn

SEED = 0
# (expansion factor t, output channels c, repeats n, first stride s), from the paper's Table 2.
INVERTED_RESIDUAL_SETTINGS: tuple[tuple[int, int, int, int], ...] = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


def _make_divisible(value: float, divisor: int = 8) -> int:
    """Round a channel count to a multiple of `divisor`, never dropping more than 10%."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    if rounded < 0.9 * value:
        rounded += divisor
    return rounded


class ConvBNReLU6(nn.Sequential):
    def __init__(self, in_ch: int, out_ch: int, kernel: int = 3, stride: int = 1, groups: int = 1) -> None:
        super().__init__(
            nn.Conv2d(in_ch, out_ch, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
            nn.BatchNorm2d(out_ch),
            nn.ReLU6(inplace=True),
        )


class InvertedResidual(nn.Module):
    def __init__(self, in_ch: int, out_ch: int, stride: int, expand_ratio: int) -> None:
        super().__init__()
        hidden = int(round(in_ch * expand_ratio))
        self.use_residual = stride == 1 and in_ch == out_ch
        layers: list[nn.Module] = []
        if expand_ratio != 1:
            layers.append(ConvBNReLU6(in_ch, hidden, kernel=1))
        layers += [
            ConvBNReLU6(hidden, hidden, stride=stride, groups=hidden),  # depthwise
            nn.Conv2d(hidden, out_ch, 1, bias=False),  # linear bottleneck
            nn.BatchNorm2d(out_ch),
        ]
        self.conv = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.use_residual:
            return x + self.conv(x)
        return self.conv(x)


class MobileNetV2(nn.Module):
    def __init__(self, num_classes: int = 1000, width_mult: float = 1.0, dropout: float = 0.2) -> None:
        super().__init__()
        in_ch = _make_divisible(32 * width_mult)
        last_ch = _make_divisible(1280 * max(1.0, width_mult))
        features: list[nn.Module] = [ConvBNReLU6(3, in_ch, stride=2)]
        for t, c, n, s in INVERTED_RESIDUAL_SETTINGS:
            out_ch = _make_divisible(c * width_mult)
            for i in range(n):
                features.append(InvertedResidual(in_ch, out_ch, s if i == 0 else 1, t))
                in_ch = out_ch
        features.append(ConvBNReLU6(in_ch, last_ch, kernel=1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(dropout), nn.Linear(last_ch, num_classes))
        self._init_weights()

    def _init_weights(self) -> None:
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
            elif isinstance(m, nn.BatchNorm2d):
                # Non-trivial statistics so that folding batch norm into conv is exercised.
                nn.init.uniform_(m.weight, 0.5, 1.5)
                nn.init.uniform_(m.bias, -0.1, 0.1)
                nn.init.uniform_(m.running_mean, -0.1, 0.1)
                nn.init.uniform_(m.running_var, 0.5, 1.5)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        x = nn.functional.adaptive_avg_pool2d(x, 1)
        x = torch.flatten(x, 1)
        return self.classifier(x)


def build() -> nn.Module:
    torch.manual_seed(SEED)
    return MobileNetV2().eval()


def example_inputs() -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(SEED + 1)
    return (torch.rand(1, 3, 224, 224, generator=generator),)
