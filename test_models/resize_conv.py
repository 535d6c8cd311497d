"""Resizing, convolution and pooling: the schema types SymInt[]? and float[]? (one given, the other None),
int[2] arguments given and left at their defaults, str padding and int groups.

Exercises aten::upsample_nearest2d.vec and aten::upsample_bilinear2d.vec through F.interpolate with a size
and with a scale factor (bilinear with align_corners True and False), aten::conv2d with non-default
stride/padding/dilation and with every default omitted, aten::conv2d.padding (padding="same") with groups,
and aten::max_pool2d and aten::avg_pool2d with their optional arguments omitted. The lite-interpreter
bytecode drops trailing arguments equal to the schema default, so these ops are stored with fewer arguments
than their schemas declare. Scripted F.interpolate keeps a branch per input rank, so the model also lists
the 1-d and 3-d nearest kernels, which never run.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

SEED = 0


class ResizeConv(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(8, 3, 3, 3) * 0.2)
        self.bias = nn.Parameter(torch.randn(8) * 0.1)
        self.grouped_weight = nn.Parameter(torch.randn(8, 2, 3, 3) * 0.2)  # 8 -> 8 channels in 4 groups

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        # x: [1, 3, 12, 12]
        nearest_sized = F.interpolate(x, size=[16, 20], mode="nearest")
        nearest_scaled = F.interpolate(x, scale_factor=[2.0, 1.5], mode="nearest")
        bilinear_sized = F.interpolate(x, size=[9, 15], mode="bilinear", align_corners=True)
        bilinear_scaled = F.interpolate(x, scale_factor=2.0, mode="bilinear", align_corners=False)

        strided = F.conv2d(bilinear_scaled, self.weight, self.bias, stride=[2, 1], padding=[2, 1], dilation=[2, 1])
        plain = F.conv2d(nearest_sized, self.weight)  # stride, padding, dilation, groups at their defaults
        grouped = F.conv2d(plain, self.grouped_weight, None, 1, "same", 1, 4)  # the str-padding overload

        max_pooled = F.max_pool2d(grouped, 2)  # stride defaults to kernel_size, padding 0
        avg_pooled = F.avg_pool2d(strided, [3, 2])
        return max_pooled, avg_pooled, nearest_scaled, bilinear_sized


def build() -> nn.Module:
    torch.manual_seed(SEED)
    return ResizeConv().eval()


def example_inputs() -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(SEED + 1)
    return (torch.rand(1, 3, 12, 12, generator=generator),)
