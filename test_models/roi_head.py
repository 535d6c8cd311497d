"""A Faster R-CNN box head (Ren et al., 2015; torchvision's RoIHeads) on a given feature map and proposals.

RoIAlign (`torchvision::roi_align`, 7x7, two samples per bin, the unaligned legacy mode Faster R-CNN uses)
pools each proposal from a stride-8 feature map; a two-layer MLP feeds a classifier and a class-specific box
regressor. Postprocessing as torchvision's: decode each class's box against the proposal, clip to the image,
softmax scores, drop the background class, low scores and tiny boxes, then NMS per class
(`torchvision::nms`, one call per class) and keep the best detections.

Inputs: a feature map [1, 32, 32, 32] of a 256x256 image and 48 proposals (x1, y1, x2, y2) in pixels, some
reaching past the image. Weights are random from a fixed seed. Outputs: boxes, scores and labels.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from test_models.torchvision_ops import ensure_torchvision_ops

ensure_torchvision_ops()

# Seed and thresholds chosen so that every decision has a margin far above float error (candidate scores
# >= 2e-3 from the threshold and >= 3.7e-4 apart, same-class IoUs >= 1.5e-3 from the NMS threshold): the
# detections are then the same in eager, frozen and C++ runs, not just close. 39 candidates, NMS drops 3.
SEED = 7
IMAGE_SIZE = 256
FEATURE_STRIDE = 8
CHANNELS = 32
POOLED_SIZE = 7
SAMPLING_RATIO = 2
NUM_PROPOSALS = 48
NUM_CLASSES = 5  # including the background, class 0
HIDDEN = 128
BOX_WEIGHTS = (10.0, 10.0, 5.0, 5.0)  # torchvision's Faster R-CNN box coder
SCORE_THRESHOLD = 0.3
NMS_IOU_THRESHOLD = 0.5
MIN_BOX_SIZE = 1e-2
MAX_DETECTIONS = 30


class RoIBoxHead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mlp = nn.Sequential(
            nn.Linear(CHANNELS * POOLED_SIZE * POOLED_SIZE, HIDDEN),
            nn.ReLU(inplace=True),
            nn.Linear(HIDDEN, HIDDEN),
            nn.ReLU(inplace=True),
        )
        self.cls_score = nn.Linear(HIDDEN, NUM_CLASSES)
        self.bbox_pred = nn.Linear(HIDDEN, NUM_CLASSES * 4)
        # Plain attributes rather than module globals: TorchScript cannot read globals from methods.
        self.spatial_scale = 1.0 / FEATURE_STRIDE
        self.pooled_size = POOLED_SIZE
        self.sampling_ratio = SAMPLING_RATIO
        self.num_classes = NUM_CLASSES
        self.box_weights = list(BOX_WEIGHTS)
        self.image_size = IMAGE_SIZE
        self.score_threshold = SCORE_THRESHOLD
        self.nms_iou_threshold = NMS_IOU_THRESHOLD
        self.min_box_size = MIN_BOX_SIZE
        self.max_detections = MAX_DETECTIONS
        # Wider than nn.Linear's default so that class scores spread out, as a trained head's do.
        nn.init.normal_(self.cls_score.weight, 0.0, 0.6)
        nn.init.zeros_(self.cls_score.bias)

    def forward(self, features: Tensor, proposals: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        # torchvision's rois: the image's index in the batch, then the box (one image here).
        rois = torch.cat([torch.zeros_like(proposals[:, :1]), proposals], dim=1)
        pooled = torch.ops.torchvision.roi_align(
            features, rois, self.spatial_scale, self.pooled_size, self.pooled_size, self.sampling_ratio, False
        )
        hidden = self.mlp(pooled.flatten(1))
        scores = torch.softmax(self.cls_score(hidden), dim=-1)
        deltas = self.bbox_pred(hidden).reshape(-1, self.num_classes, 4)
        boxes = decode_per_class(deltas, proposals, self.box_weights).clamp(min=0.0, max=float(self.image_size))
        return self.postprocess(boxes, scores)

    def postprocess(self, boxes: Tensor, scores: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """boxes [N, classes, 4], scores [N, classes] -> the best detections over the foreground classes."""
        labels = torch.arange(self.num_classes).expand_as(scores)
        # Drop the background column, then treat every (proposal, class) pair as a candidate.
        boxes = boxes[:, 1:].reshape(-1, 4)
        scores = scores[:, 1:].flatten()
        labels = labels[:, 1:].flatten()
        wide = (boxes[:, 2] - boxes[:, 0] >= self.min_box_size) & (boxes[:, 3] - boxes[:, 1] >= self.min_box_size)
        keep = torch.nonzero((scores > self.score_threshold) & wide).flatten()
        boxes, scores, labels = boxes[keep], scores[keep], labels[keep]

        kept: list[Tensor] = []
        for label in range(1, self.num_classes):
            members = torch.nonzero(labels == label).flatten()
            kept.append(members[torch.ops.torchvision.nms(boxes[members], scores[members], self.nms_iou_threshold)])
        chosen = torch.cat(kept)
        best = scores[chosen].argsort(descending=True)[: self.max_detections]
        chosen = chosen[best]
        return boxes[chosen], scores[chosen], labels[chosen]


def decode_per_class(deltas: Tensor, proposals: Tensor, weights: list[float]) -> Tensor:
    """Class-specific deltas [N, classes, 4] against proposals [N, 4] -> boxes [N, classes, 4]."""
    widths = (proposals[:, 2] - proposals[:, 0])[:, None]
    heights = (proposals[:, 3] - proposals[:, 1])[:, None]
    centre_x = proposals[:, 0, None] + 0.5 * widths
    centre_y = proposals[:, 1, None] + 0.5 * heights
    # exp() of a width or height delta is capped, as torchvision's box coder does.
    max_log_scale = math.log(1000.0 / 16)
    dw = (deltas[:, :, 2] / weights[2]).clamp(max=max_log_scale)
    dh = (deltas[:, :, 3] / weights[3]).clamp(max=max_log_scale)
    pred_x = deltas[:, :, 0] / weights[0] * widths + centre_x
    pred_y = deltas[:, :, 1] / weights[1] * heights + centre_y
    half_w = 0.5 * torch.exp(dw) * widths
    half_h = 0.5 * torch.exp(dh) * heights
    return torch.stack([pred_x - half_w, pred_y - half_h, pred_x + half_w, pred_y + half_h], dim=2)


def build() -> nn.Module:
    torch.manual_seed(SEED)
    return RoIBoxHead().eval()


def example_inputs() -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(SEED + 1)
    side = IMAGE_SIZE // FEATURE_STRIDE
    features = torch.randn(1, CHANNELS, side, side, generator=generator)
    corner = torch.rand(NUM_PROPOSALS, 2, generator=generator) * (IMAGE_SIZE - 16) - 8
    size = 16 + torch.rand(NUM_PROPOSALS, 2, generator=generator) * 96
    return features, torch.cat([corner, corner + size], dim=1)
