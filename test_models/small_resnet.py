"""A small ResNet (He et al., 2015) in plain torch.nn, saved unfrozen as a user saves a scripted model.

Basic blocks (two 3x3 conv + batch norm, ReLU, a residual `out += identity`, a 1x1 conv + batch norm
downsample where the shape changes), a 7x7 stride-2 stem with max pooling, global average pooling and a linear
classifier. Batch norms have non-trivial random statistics (a folded batch norm that was computed wrongly
changes the outputs well beyond 1e-5). The model exercises bind-time freezing: weights read with GET_ATTR, a
`self.training` branch in every batch norm, conv + batch norm pairs to fold.
"""
from __future__ import annotations

import torch
from torch import nn

from test_models.batch_norm_statistics import randomize_batch_norms

SEED = 0
WIDTHS = (16, 32, 64)


class BasicBlock(nn.Module):
    def __init__(self, in_ch: int, out_ch: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_ch, out_ch, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_ch)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(out_ch, out_ch, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_ch)
        self.downsample: nn.Module | None = None
        if stride != 1 or in_ch != out_ch:
            self.downsample = nn.Sequential(nn.Conv2d(in_ch, out_ch, 1, stride, bias=False), nn.BatchNorm2d(out_ch))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class SmallResNet(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, WIDTHS[0], 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(WIDTHS[0])
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        blocks = []
        in_ch = WIDTHS[0]
        for i, width in enumerate(WIDTHS):
            blocks += [BasicBlock(in_ch, width, 1 if i == 0 else 2), BasicBlock(width, width, 1)]
            in_ch = width
        self.layers = nn.Sequential(*blocks)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_ch, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layers(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


def build() -> nn.Module:
    torch.manual_seed(SEED)
    return randomize_batch_norms(SmallResNet()).eval()


def example_inputs() -> tuple[torch.Tensor, ...]:
    torch.manual_seed(SEED + 1)
    return (torch.randn(1, 3, 64, 64),)
