"""Micro benchmark: a detection post-processing block (box decoding, scoring, top-k), repeated in a loop.

What follows a detector's heads, on 16 anchors and 3 classes: decode box deltas against anchors (select,
arithmetic, exp, clamp, stack), score classes (sigmoid, max over classes), keep the top 8 (topk,
index_select). Tiny tensors and 53 operator calls per iteration: per-op overhead dominates, as it does in
real post-processing. `benchmarks/kernel_floor.cpp` makes the same kernel calls from C++.

Not frozen (freezing unrolls loops), and nothing in it is a constant: every op runs every iteration.
"""
from __future__ import annotations

import torch
from torch import nn

SEED = 0
NUM_ANCHORS = 16
NUM_CLASSES = 3
TOP_K = 8
LOOP_ITERATIONS = 50
# The native operator calls one loop iteration makes, in order.
# `t[:, i]` is a slice of dim 0 (the whole range) and then a select of dim 1.
_COLUMN = ("aten::slice.Tensor", "aten::select.int")
# The native operator calls one loop iteration makes, in order.
OPS_PER_ITERATION: tuple[str, ...] = (
    # widths, heights, centres
    *_COLUMN, *_COLUMN, "aten::sub.Tensor",
    *_COLUMN, *_COLUMN, "aten::sub.Tensor",
    *_COLUMN, "aten::mul.Scalar", "aten::add.Tensor",
    *_COLUMN, "aten::mul.Scalar", "aten::add.Tensor",
    # scaled deltas
    *_COLUMN, "aten::div.Scalar",
    *_COLUMN, "aten::div.Scalar",
    *_COLUMN, "aten::div.Scalar", "aten::clamp",
    *_COLUMN, "aten::div.Scalar", "aten::clamp",
    # decoded centres and sizes
    "aten::mul.Tensor", "aten::add.Tensor", "aten::mul.Tensor", "aten::add.Tensor",
    "aten::exp", "aten::mul.Tensor", "aten::exp", "aten::mul.Tensor",
    # corners
    "aten::mul.Scalar", "aten::mul.Scalar", "aten::sub.Tensor", "aten::sub.Tensor",
    "aten::add.Tensor", "aten::add.Tensor", "aten::stack", "aten::clamp",
    # scores and top-k
    "aten::sigmoid", "aten::max.dim", "aten::topk", "aten::index_select", "aten::index_select",
)


class PostProcess(nn.Module):
    def forward(
        self, deltas: torch.Tensor, anchors: torch.Tensor, logits: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        top_boxes = torch.zeros(0)
        top_scores = torch.zeros(0)
        top_labels = torch.zeros(0, dtype=torch.long)
        for _ in range(50):  # LOOP_ITERATIONS; TorchScript needs the literal
            widths = anchors[:, 2] - anchors[:, 0]
            heights = anchors[:, 3] - anchors[:, 1]
            centre_x = anchors[:, 0] + widths * 0.5
            centre_y = anchors[:, 1] + heights * 0.5
            # torchvision's SSD box coder weights (10, 10, 5, 5) and its clamp of log-sizes.
            dx = deltas[:, 0] / 10.0
            dy = deltas[:, 1] / 10.0
            dw = torch.clamp(deltas[:, 2] / 5.0, max=4.135)
            dh = torch.clamp(deltas[:, 3] / 5.0, max=4.135)
            pred_x = dx * widths + centre_x
            pred_y = dy * heights + centre_y
            pred_w = torch.exp(dw) * widths
            pred_h = torch.exp(dh) * heights
            half_w = pred_w * 0.5
            half_h = pred_h * 0.5
            corners = [pred_x - half_w, pred_y - half_h, pred_x + half_w, pred_y + half_h]
            boxes = torch.clamp(torch.stack(corners, dim=1), 0.0, 320.0)
            best, labels = torch.sigmoid(logits).max(dim=1)
            top_scores, order = best.topk(8)  # TOP_K
            top_boxes = boxes.index_select(0, order)
            top_labels = labels.index_select(0, order)
        return top_boxes, top_scores, top_labels


def build() -> nn.Module:
    return PostProcess().eval()


def example_inputs() -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(SEED)
    deltas = torch.randn(NUM_ANCHORS, 4, generator=generator)
    corner = torch.rand(NUM_ANCHORS, 2, generator=generator) * 200
    size = torch.rand(NUM_ANCHORS, 2, generator=generator) * 100 + 10
    anchors = torch.cat([corner, corner + size], dim=1)
    logits = torch.randn(NUM_ANCHORS, NUM_CLASSES, generator=generator)
    return deltas, anchors, logits
