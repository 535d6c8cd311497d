"""A small model calling the other four torchvision detection ops, returning every output they produce.

A stem conv makes a feature map; a modulated deformable conv (DCNv2: `torchvision::deform_conv2d` with
offsets and a sigmoid mask predicted by convs, two groups and two offset groups) turns it into an R-FCN style
position-sensitive score map, which `torchvision::ps_roi_align` and `torchvision::ps_roi_pool` pool per roi;
`torchvision::roi_pool` max-pools the stem features.

Inputs: an image [1, 3, 32, 32] and 8 rois (batch_index, x1, y1, x2, y2) in pixels, some reaching past the
image. Weights are random from a fixed seed.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from test_models.torchvision_ops import ensure_torchvision_ops

ensure_torchvision_ops()

SEED = 0
IMAGE_SIZE = 32
STEM_CHANNELS = 16
POOLED_SIZE = 3
SCORE_CLASSES = 2  # position-sensitive map: SCORE_CLASSES * 3 * 3 channels
KERNEL = 3
GROUPS = 2
OFFSET_GROUPS = 2
NUM_ROIS = 8


class DetectionOps(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        taps = KERNEL * KERNEL
        score_channels = SCORE_CLASSES * POOLED_SIZE * POOLED_SIZE
        # No activation after the stem: roi_pool's argmax is then free of ties between zeros.
        self.stem = nn.Conv2d(3, STEM_CHANNELS, 3, stride=2, padding=1)
        self.offset = nn.Conv2d(STEM_CHANNELS, 2 * OFFSET_GROUPS * taps, 3, padding=1)
        self.mask = nn.Conv2d(STEM_CHANNELS, OFFSET_GROUPS * taps, 3, padding=1)
        self.deform_weight = nn.Parameter(torch.randn(score_channels, STEM_CHANNELS // GROUPS, KERNEL, KERNEL) * 0.2)
        self.deform_bias = nn.Parameter(torch.randn(score_channels) * 0.1)
        # Offsets of a few pixels, so that samples land between pixels and past the borders.
        nn.init.normal_(self.offset.weight, 0.0, 0.3)
        # Plain attributes rather than module globals: TorchScript cannot read globals from methods.
        self.spatial_scale = 0.5  # the stem has stride 2
        self.pooled_size = POOLED_SIZE
        self.groups = GROUPS
        self.offset_groups = OFFSET_GROUPS

    def forward(self, image: Tensor, rois: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
        features = self.stem(image)
        score_map = torch.ops.torchvision.deform_conv2d(
            features, self.deform_weight, self.offset(features), torch.sigmoid(self.mask(features)),
            self.deform_bias, 1, 1, 1, 1, 1, 1, self.groups, self.offset_groups, True,
        )
        pooled, argmax = torch.ops.torchvision.roi_pool(
            features, rois, self.spatial_scale, self.pooled_size, self.pooled_size
        )
        ps_aligned, aligned_channels = torch.ops.torchvision.ps_roi_align(
            score_map, rois, self.spatial_scale, self.pooled_size, self.pooled_size, 2
        )
        ps_pooled, pooled_channels = torch.ops.torchvision.ps_roi_pool(
            score_map, rois, self.spatial_scale, self.pooled_size, self.pooled_size
        )
        return score_map, pooled, argmax, ps_aligned, aligned_channels, ps_pooled, pooled_channels


def build() -> nn.Module:
    torch.manual_seed(SEED)
    return DetectionOps().eval()


def example_inputs() -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(SEED + 1)
    image = torch.rand(1, 3, IMAGE_SIZE, IMAGE_SIZE, generator=generator)
    corner = torch.rand(NUM_ROIS, 2, generator=generator) * IMAGE_SIZE - 4
    size = 4 + torch.rand(NUM_ROIS, 2, generator=generator) * 16
    rois = torch.cat([torch.zeros(NUM_ROIS, 1), corner, corner + size], dim=1)
    return image, rois
