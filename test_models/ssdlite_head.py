"""SSDlite detection heads (Sandler et al., 2018; torchvision's ssdlite320) on given feature maps.

Per level, depthwise-separable heads (3x3 depthwise conv + batch norm + ReLU6, then a 1x1 conv) predict
class logits and box deltas for three anchors per location. The forward pass then does what torchvision's
SSD postprocessing does: generates the anchors from the feature sizes, decodes the boxes, scores every class
with a sigmoid, drops scores under a threshold, keeps the top k, and runs class-aware NMS with one
`torchvision::nms` call by shifting each class's boxes so that different classes never overlap.

Two configurations, each as the whole head and as its convolutional part alone (the same seeded weights,
returning the raw prediction maps, classifier then regressor per level: what ONNX Runtime and ExecuTorch are
timed against without post-processing):
- SMALL (`ssdlite_head`, `ssdlite_head_convs`): the feature maps of one 320x320 image at strides 16, 32 and
  64, 32 to 64 channels, 6 classes.
- LARGE (`ssdlite_large_head`, `ssdlite_large_head_convs`): MobileNetV2's own feature maps of a 320x320 image
  as SSDlite reads them, 96 channels at 20x20 (stride 16) and 1280 at 10x10 (stride 32), COCO's 91 classes.

Weights are random from a fixed seed. Outputs of a whole head, per detection: boxes (x1, y1, x2, y2), scores,
labels and the image index.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from test_models.torchvision_ops import ensure_torchvision_ops

ensure_torchvision_ops()

IMAGE_SIZE = 320
ASPECT_RATIOS = (1.0, 2.0, 0.5)
BOX_WEIGHTS = (10.0, 10.0, 5.0, 5.0)  # torchvision's SSD box coder
TOP_K = 200
NMS_IOU_THRESHOLD = 0.5


@dataclass(frozen=True)
class HeadConfig:
    """One head: its levels, classes and seed, and the post-processing's thresholds."""

    seed: int
    level_channels: tuple[int, ...]
    level_sizes: tuple[int, ...]  # IMAGE_SIZE / stride, per level
    anchor_scales: tuple[float, ...]  # anchor side as a fraction of the image, per level
    num_classes: int
    score_threshold: float
    max_detections: int


# Seeds and thresholds chosen so that every decision has a margin far above float error: the detections are
# then the same in eager, frozen and C++ runs, not just close.
# SMALL: candidate scores >= 6e-4 from the threshold and 1.8e-4 apart, same-class IoUs >= 2e-3 from the NMS
# threshold.
SMALL = HeadConfig(seed=5, level_channels=(32, 48, 64), level_sizes=(20, 10, 5), anchor_scales=(0.2, 0.45, 0.7),
                   num_classes=6, score_threshold=0.6, max_detections=50)
# LARGE: 52 candidates (scores >= 1.2e-3 from the threshold and 5.4e-5 apart), 48 detections (same-class IoUs
# >= 1.5e-2 from the NMS threshold).
LARGE = HeadConfig(seed=7, level_channels=(96, 1280), level_sizes=(20, 10), anchor_scales=(0.2, 0.45),
                   num_classes=91, score_threshold=0.9076, max_detections=100)


class SeparableHead(nn.Sequential):
    """3x3 depthwise conv + BN + ReLU6, then a 1x1 conv to `out_ch` channels (SSDlite's prediction head)."""

    def __init__(self, in_ch: int, out_ch: int) -> None:
        super().__init__(
            nn.Conv2d(in_ch, in_ch, 3, padding=1, groups=in_ch, bias=False),
            nn.BatchNorm2d(in_ch),
            nn.ReLU6(inplace=True),
            nn.Conv2d(in_ch, out_ch, 1),
        )


class LevelHead(nn.Module):
    """Predictions and anchors of one feature level, all in (location, anchor) order."""

    def __init__(self, in_ch: int, anchor_size: float, num_classes: int) -> None:
        super().__init__()
        self.num_anchors = len(ASPECT_RATIOS)
        self.anchor_side = anchor_size * IMAGE_SIZE
        self.image_size = IMAGE_SIZE
        self.aspect_ratios = list(ASPECT_RATIOS)
        self.classifier = SeparableHead(in_ch, self.num_anchors * num_classes)
        self.regressor = SeparableHead(in_ch, self.num_anchors * 4)

    def forward(self, feature: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Returns logits [B, HWA, classes], deltas [B, HWA, 4] and anchors [HWA, 4] as (cx, cy, w, h)."""
        logits = _per_anchor(self.classifier(feature), self.num_anchors)
        deltas = _per_anchor(self.regressor(feature), self.num_anchors)
        return logits, deltas, self.anchors(feature.shape[2], feature.shape[3])

    def anchors(self, height: int, width: int) -> Tensor:
        return grid_anchors(height, width, self.anchor_side, self.aspect_ratios, self.image_size)


def grid_anchors(height: int, width: int, side: float, aspect_ratios: list[float], image_size: int) -> Tensor:
    """[H * W * A, 4] anchors (cx, cy, w, h) in (location, anchor) order, A = one per aspect ratio."""
    ys = (torch.arange(height, dtype=torch.float32) + 0.5) * (image_size / height)
    xs = (torch.arange(width, dtype=torch.float32) + 0.5) * (image_size / width)
    num_anchors = len(aspect_ratios)
    centre_y = ys[:, None, None].expand(height, width, num_anchors)
    centre_x = xs[None, :, None].expand(height, width, num_anchors)
    ratios = torch.tensor(aspect_ratios)
    anchor_w = (side * torch.sqrt(ratios)).expand(height, width, num_anchors)
    anchor_h = (side / torch.sqrt(ratios)).expand(height, width, num_anchors)
    return torch.stack([centre_x, centre_y, anchor_w, anchor_h], dim=-1).reshape(-1, 4)


def _per_anchor(prediction: Tensor, num_anchors: int) -> Tensor:
    """[B, A * K, H, W] -> [B, H * W * A, K]."""
    batch, channels, height, width = prediction.shape
    per_anchor = channels // num_anchors
    prediction = prediction.reshape(batch, num_anchors, per_anchor, height, width)
    return prediction.permute(0, 3, 4, 1, 2).reshape(batch, -1, per_anchor)


def decode_boxes(deltas: Tensor, anchors: Tensor, weights: list[float], image_size: int) -> Tensor:
    """Deltas [N, 4] against anchors [N, 4] (cx, cy, w, h) -> boxes (x1, y1, x2, y2) clipped to the image.
    exp() of a width or height delta is capped, as torchvision's box coder does."""
    max_log_scale = math.log(1000.0 / 16)
    dx = deltas[:, 0] / weights[0]
    dy = deltas[:, 1] / weights[1]
    dw = (deltas[:, 2] / weights[2]).clamp(max=max_log_scale)
    dh = (deltas[:, 3] / weights[3]).clamp(max=max_log_scale)
    centre_x = anchors[:, 0] + dx * anchors[:, 2]
    centre_y = anchors[:, 1] + dy * anchors[:, 3]
    half_w = 0.5 * torch.exp(dw) * anchors[:, 2]
    half_h = 0.5 * torch.exp(dh) * anchors[:, 3]
    boxes = torch.stack([centre_x - half_w, centre_y - half_h, centre_x + half_w, centre_y + half_h], dim=1)
    return boxes.clamp(min=0.0, max=float(image_size))


def class_aware_nms(boxes: Tensor, scores: Tensor, labels: Tensor, iou_threshold: float) -> Tensor:
    """NMS within each class in one call: each class's boxes are shifted past every other class's."""
    if boxes.numel() == 0:
        # Sized from the input, not a constant: freezing folded a constant-sized one into the model's constants
        # in some exports and not in others, and the ops yaml's debug_info flipped with it.
        return torch.zeros(boxes.size(0), dtype=torch.int64)
    shift = labels.to(boxes.dtype) * (boxes.max() + 1)
    return torch.ops.torchvision.nms(boxes + shift[:, None], scores, iou_threshold)


class SSDLiteHead(nn.Module):
    """A head on its config's feature maps (forward: the three of SMALL); the subclasses below differ only in
    forward's arguments (the number of levels) and in what they return."""

    def __init__(self, config: HeadConfig = SMALL) -> None:
        super().__init__()
        self.levels = nn.ModuleList(
            [LevelHead(ch, scale, config.num_classes) for ch, scale in zip(config.level_channels, config.anchor_scales)]
        )
        # Plain attributes rather than module globals: TorchScript cannot read globals from methods.
        self.image_size = IMAGE_SIZE
        self.num_classes = config.num_classes
        self.box_weights = list(BOX_WEIGHTS)
        self.score_threshold = config.score_threshold
        self.top_k = TOP_K
        self.nms_iou_threshold = NMS_IOU_THRESHOLD
        self.max_detections = config.max_detections
        self._init_weights()

    def _init_weights(self) -> None:
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.normal_(m.weight, 0.0, 0.1)
                if m.bias is not None:
                    nn.init.uniform_(m.bias, -0.1, 0.1)
            elif isinstance(m, nn.BatchNorm2d):
                # Non-trivial statistics, so that freezing (which folds them into the convs) is exercised.
                nn.init.uniform_(m.weight, 0.5, 1.5)
                nn.init.uniform_(m.bias, -0.1, 0.1)
                nn.init.uniform_(m.running_mean, -0.1, 0.1)
                nn.init.uniform_(m.running_var, 0.5, 1.5)

    def forward(self, p16: Tensor, p32: Tensor, p64: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        return self.detect([p16, p32, p64])

    def head_maps(self, features: list[Tensor]) -> list[Tensor]:
        """The convolutional part alone: per level the classifier's [B, A * classes, H, W] and the
        regressor's [B, A * 4, H, W] maps, as the convs compute them."""
        maps: list[Tensor] = []
        for i, level in enumerate(self.levels):
            maps.append(level.classifier(features[i]))
            maps.append(level.regressor(features[i]))
        return maps

    def detect(self, features: list[Tensor]) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        all_logits: list[Tensor] = []
        all_deltas: list[Tensor] = []
        all_anchors: list[Tensor] = []
        for i, level in enumerate(self.levels):
            logits, deltas, anchors = level(features[i])
            all_logits.append(logits)
            all_deltas.append(deltas)
            all_anchors.append(anchors)
        logits = torch.cat(all_logits, dim=1)
        deltas = torch.cat(all_deltas, dim=1)
        anchors = torch.cat(all_anchors, dim=0)

        boxes: list[Tensor] = []
        scores: list[Tensor] = []
        labels: list[Tensor] = []
        image_index: list[Tensor] = []
        for image in range(logits.shape[0]):
            image_boxes, image_scores, image_labels = self.postprocess(logits[image], deltas[image], anchors)
            boxes.append(image_boxes)
            scores.append(image_scores)
            labels.append(image_labels)
            image_index.append(torch.full_like(image_labels, image))
        return torch.cat(boxes), torch.cat(scores), torch.cat(labels), torch.cat(image_index)

    def postprocess(self, logits: Tensor, deltas: Tensor, anchors: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        return select_detections(
            logits, deltas, anchors, self.score_threshold, self.top_k, self.num_classes, self.box_weights,
            self.image_size, self.nms_iou_threshold, self.max_detections,
        )


def select_detections(
    logits: Tensor,
    deltas: Tensor,
    anchors: Tensor,
    score_threshold: float,
    top_k: int,
    num_classes: int,
    box_weights: list[float],
    image_size: int,
    nms_iou_threshold: float,
    max_detections: int,
) -> tuple[Tensor, Tensor, Tensor]:
    """One image: threshold, top-k over (anchor, class) pairs, decode, class-aware NMS."""
    scores = torch.sigmoid(logits).flatten()
    candidates = torch.nonzero(scores > score_threshold).flatten()
    top_scores, order = scores[candidates].topk(min(top_k, candidates.numel()))
    chosen = candidates[order]
    anchor_index = torch.div(chosen, num_classes, rounding_mode="floor")
    labels = chosen % num_classes
    boxes = decode_boxes(deltas[anchor_index], anchors[anchor_index], box_weights, image_size)
    keep = class_aware_nms(boxes, top_scores, labels, nms_iou_threshold)[:max_detections]
    return boxes[keep], top_scores[keep], labels[keep]


class SSDLiteHeadConvs(SSDLiteHead):
    def forward(self, p16: Tensor, p32: Tensor, p64: Tensor) -> list[Tensor]:
        return self.head_maps([p16, p32, p64])


class LargeSSDLiteHead(SSDLiteHead):
    def forward(self, p16: Tensor, p32: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        return self.detect([p16, p32])


class LargeSSDLiteHeadConvs(SSDLiteHead):
    def forward(self, p16: Tensor, p32: Tensor) -> list[Tensor]:
        return self.head_maps([p16, p32])


def _build(head: type[SSDLiteHead], config: HeadConfig) -> nn.Module:
    torch.manual_seed(config.seed)
    return head(config).eval()


def _example_inputs(config: HeadConfig) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(config.seed + 1)
    return tuple(
        torch.randn(1, channels, size, size, generator=generator)
        for channels, size in zip(config.level_channels, config.level_sizes)
    )


def build() -> nn.Module:
    return _build(SSDLiteHead, SMALL)


def build_convs() -> nn.Module:
    return _build(SSDLiteHeadConvs, SMALL)


def build_large() -> nn.Module:
    return _build(LargeSSDLiteHead, LARGE)


def build_large_convs() -> nn.Module:
    return _build(LargeSSDLiteHeadConvs, LARGE)


def example_inputs() -> tuple[torch.Tensor, ...]:
    return _example_inputs(SMALL)


def example_inputs_large() -> tuple[torch.Tensor, ...]:
    return _example_inputs(LARGE)
