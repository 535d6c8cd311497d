"""A small EfficientNet / MobileNetV3-style network in plain torch.nn, with the activations real classifiers and
encoders put right after a conv or a linear.

Inverted-residual blocks (Sandler et al., 2018; Tan and Le, 2019): a 1x1 expansion conv + batch norm + SiLU, a 3x3
depthwise conv + batch norm + SiLU, squeeze-excitation (global average pooling, 1x1 conv + SiLU, 1x1 conv +
sigmoid, a product with the feature map), a 1x1 projection conv + batch norm and the residual add; a
MobileNetV3-style block with hardswish and a hardsigmoid gate; a conv + residual add + ReLU; and a head of linear
+ GELU, linear + tanh, and a linear + GELU in its tanh approximation (which the bind-time stage must not fuse:
oneDNN Graph's GELU is the erf form). The bind-time stage fuses each activation into the kernel of the conv or
linear before it (bind_time/weight_sites.h); batch norms have random statistics, so a wrong fold or a wrong
activation changes the outputs well beyond 1e-5. Saved frozen and unfrozen (bind-time freezing folds them first).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from test_models.batch_norm_statistics import randomize_batch_norms

SEED = 0


def conv_bn(in_ch: int, out_ch: int, kernel: int, stride: int = 1, groups: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(in_ch, out_ch, kernel, stride, kernel // 2, groups=groups, bias=False), nn.BatchNorm2d(out_ch))


class SqueezeExcitation(nn.Module):
    def __init__(self, channels: int, squeezed: int, gate: nn.Module) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, squeezed, 1)
        self.act = nn.SiLU()
        self.fc2 = nn.Conv2d(squeezed, channels, 1)
        self.gate = gate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = self.gate(self.fc2(self.act(self.fc1(self.pool(x)))))
        return scale * x


class MBConv(nn.Module):
    """EfficientNet's block: SiLU activations, a sigmoid-gated squeeze-excitation."""

    def __init__(self, in_ch: int, out_ch: int, expand: int, stride: int) -> None:
        super().__init__()
        hidden = in_ch * expand
        self.expand = conv_bn(in_ch, hidden, 1)
        self.expand_act = nn.SiLU(inplace=True)
        self.depthwise = conv_bn(hidden, hidden, 3, stride, groups=hidden)
        self.depthwise_act = nn.SiLU(inplace=True)
        self.se = SqueezeExcitation(hidden, max(1, in_ch // 4), nn.Sigmoid())
        self.project = conv_bn(hidden, out_ch, 1)
        self.residual = stride == 1 and in_ch == out_ch

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.expand_act(self.expand(x))
        out = self.depthwise_act(self.depthwise(out))
        out = self.project(self.se(out))
        if self.residual:
            out = out + x
        return out


class HardswishBlock(nn.Module):
    """MobileNetV3's block: hardswish activations, a hardsigmoid-gated squeeze-excitation."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.expand = conv_bn(channels, channels * 3, 1)
        self.expand_act = nn.Hardswish(inplace=True)
        self.depthwise = conv_bn(channels * 3, channels * 3, 3, groups=channels * 3)
        self.depthwise_act = nn.Hardswish()
        self.se = SqueezeExcitation(channels * 3, channels // 2, nn.Hardsigmoid())
        self.project = conv_bn(channels * 3, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.depthwise_act(self.depthwise(self.expand_act(self.expand(x))))
        return self.project(self.se(out)) + x


class SmallEfficientNet(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = conv_bn(3, 16, 3, 2)
        self.stem_act = nn.SiLU(inplace=True)
        self.blocks = nn.Sequential(MBConv(16, 16, 1, 1), MBConv(16, 24, 4, 2), MBConv(24, 24, 4, 1),
                                    HardswishBlock(24))
        self.tail = nn.Conv2d(24, 24, 3, 1, 1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Linear(24, 64)
        self.fc2 = nn.Linear(64, 64)
        self.fc3 = nn.Linear(64, 32)
        self.classifier = nn.Linear(32, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem_act(self.stem(x)))
        x = F.relu(x + self.tail(x))  # a conv, the residual add onto it, then a ReLU: one kernel
        h = torch.flatten(self.pool(x), 1)
        h = F.gelu(self.fc1(h))
        h = torch.tanh(self.fc2(h))
        h = F.gelu(self.fc3(h), approximate="tanh")  # not the erf form: stays outside the linear's kernel
        return self.classifier(h)


def build() -> nn.Module:
    torch.manual_seed(SEED)
    return randomize_batch_norms(SmallEfficientNet()).eval()


def example_inputs() -> tuple[torch.Tensor, ...]:
    torch.manual_seed(SEED + 1)
    return (torch.randn(1, 3, 64, 64),)
