"""A quantized detection head: an FPN-style neck and SSD-style predictors in int8, box decoding and NMS in float.

Three feature maps of one 256x256 image (strides 8, 16 and 32) enter the quantized domain through one
QuantStub each. Per level a fused 1x1 conv + bn + relu brings them to a common width; top-down, the coarsest
level is upsampled (nearest, on the quantized tensor) and concatenated with the middle one (YOLOv3's
merge: `FloatFunctional.cat`, `quantized::cat`), a fused conv + bn + relu mixes them, and the result is
upsampled again and added to the finest level (FPN's merge: `FloatFunctional.add_relu`). Each level's
predictor is a 3x3 conv + bn + hardswish (`quantized::hardswish`) and a 1x1 conv to class logits and box
deltas for three anchors per location; DeQuantStub takes them back to float. The rest is
ssdlite_head.py's: anchors, box decoding, sigmoid scores, score threshold, top-k and class-aware NMS with
`torchvision::nms`.

Weights are random from a fixed seed, calibrated on seeded random feature maps with the engine's default
qconfig. Outputs, per detection: boxes (x1, y1, x2, y2), scores and labels.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.ao.quantization import DeQuantStub, QuantStub, fuse_modules

from test_models.quantization import (
    DEFAULT_ENGINE,
    dequantized_scales,
    quantize_static,
    quantized_engine,
    seeded_batches,
)
from test_models.ssdlite_head import _per_anchor, grid_anchors, select_detections
from test_models.torchvision_ops import ensure_torchvision_ops

ensure_torchvision_ops()

# Seed and thresholds chosen so that every decision has a margin far above float error (candidate scores
# >= 3.4e-3 above the threshold, the best rejected one 1.1e-2 below, same-class IoUs >= 4e-2 from the NMS
# threshold): the detections are then the same in eager and lite runs. 37 candidates, NMS drops 7. The
# logits are multiples of one quantization step, so many scores are equal; equal scores keep topk's order
# through NMS's stable sort, the same kernels in both runs.
SEED = 3
QENGINE = DEFAULT_ENGINE
IMAGE_SIZE = 256
LEVEL_CHANNELS = (24, 48, 64)
LEVEL_SIZES = (32, 16, 8)  # IMAGE_SIZE / (8, 16, 32)
NECK_CHANNELS = 32
NUM_CLASSES = 4
ANCHOR_SCALES = (0.1, 0.25, 0.5)  # anchor side as a fraction of the image, per level
ASPECT_RATIOS = (1.0, 2.0, 0.5)
BOX_WEIGHTS = (10.0, 10.0, 5.0, 5.0)
PREDICTION_WEIGHT_STD = 0.1
BACKGROUND_PRIOR_LOGIT = -3.0
SCORE_THRESHOLD = 0.3
TOP_K = 200
NMS_IOU_THRESHOLD = 0.5
MAX_DETECTIONS = 50
CALIBRATION_BATCHES = 4


class ConvBNReLU(nn.Sequential):
    def __init__(self, in_ch: int, out_ch: int, kernel: int = 1) -> None:
        super().__init__(
            nn.Conv2d(in_ch, out_ch, kernel, padding=(kernel - 1) // 2, bias=False),
            nn.BatchNorm2d(out_ch),
            nn.ReLU(inplace=True),
        )

    def fuse(self) -> None:
        fuse_modules(self, ["0", "1", "2"], inplace=True)


class Predictor(nn.Module):
    """3x3 conv + bn + hardswish, then a 1x1 conv to `anchors * (classes + 4)` channels."""

    def __init__(self, in_ch: int, out_ch: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_ch, in_ch, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(in_ch)
        self.act = nn.Hardswish()
        self.out = nn.Conv2d(in_ch, out_ch, 1)

    def forward(self, x: Tensor) -> Tensor:
        return self.out(self.act(self.bn(self.conv(x))))

    def fuse(self) -> None:
        fuse_modules(self, ["conv", "bn"], inplace=True)  # eager mode fuses no conv + hardswish


class QuantizedDetectionHead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.quant = nn.ModuleList([QuantStub() for _ in LEVEL_CHANNELS])
        self.lateral = nn.ModuleList([ConvBNReLU(ch, NECK_CHANNELS) for ch in LEVEL_CHANNELS])
        self.upsample = nn.Upsample(scale_factor=2.0, mode="nearest")
        self.merge_cat = nn.quantized.FloatFunctional()
        self.merge_mix = ConvBNReLU(2 * NECK_CHANNELS, NECK_CHANNELS, kernel=3)
        self.merge_add = nn.quantized.FloatFunctional()
        self.num_anchors = len(ASPECT_RATIOS)
        self.predictors = nn.ModuleList(
            [Predictor(NECK_CHANNELS, self.num_anchors * (NUM_CLASSES + 4)) for _ in LEVEL_CHANNELS]
        )
        self.dequant = DeQuantStub()
        # Plain attributes rather than module globals: TorchScript cannot read globals from methods.
        self.image_size = IMAGE_SIZE
        self.num_classes = NUM_CLASSES
        self.anchor_sides = [scale * IMAGE_SIZE for scale in ANCHOR_SCALES]
        self.aspect_ratios = list(ASPECT_RATIOS)
        self.box_weights = list(BOX_WEIGHTS)
        self.score_threshold = SCORE_THRESHOLD
        self.top_k = TOP_K
        self.nms_iou_threshold = NMS_IOU_THRESHOLD
        self.max_detections = MAX_DETECTIONS
        self._init_weights()

    def _init_weights(self) -> None:
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
                if m.bias is not None:
                    nn.init.uniform_(m.bias, -0.1, 0.1)
            elif isinstance(m, nn.BatchNorm2d):
                # Non-trivial statistics so that fusing batch norm into conv is exercised.
                nn.init.uniform_(m.weight, 0.5, 1.5)
                nn.init.uniform_(m.bias, -0.1, 0.1)
                nn.init.uniform_(m.running_mean, -0.1, 0.1)
                nn.init.uniform_(m.running_var, 0.5, 1.5)
        for predictor in self.predictors:
            # As a trained detector's: most (anchor, class) pairs are confidently background.
            nn.init.normal_(predictor.out.weight, 0.0, PREDICTION_WEIGHT_STD)
            bias = predictor.out.bias.detach().view(self.num_anchors, NUM_CLASSES + 4)
            bias[:, :NUM_CLASSES] += BACKGROUND_PRIOR_LOGIT

    def forward(self, p8: Tensor, p16: Tensor, p32: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        features = self.neck(p8, p16, p32)
        logits: list[Tensor] = []
        deltas: list[Tensor] = []
        anchors: list[Tensor] = []
        for i, predictor in enumerate(self.predictors):
            prediction = _per_anchor(self.dequant(predictor(features[i])), self.num_anchors)
            logits.append(prediction[:, :, : self.num_classes])
            deltas.append(prediction[:, :, self.num_classes :])
            anchors.append(self.anchors(features[i].shape[2], features[i].shape[3], self.anchor_sides[i]))
        return self.postprocess(torch.cat(logits, dim=1)[0], torch.cat(deltas, dim=1)[0], torch.cat(anchors))

    def neck(self, p8: Tensor, p16: Tensor, p32: Tensor) -> list[Tensor]:
        """The three levels, quantized, each NECK_CHANNELS wide, coarse information merged into finer."""
        inputs = [p8, p16, p32]
        laterals: list[Tensor] = []
        for i, (quant, lateral) in enumerate(zip(self.quant, self.lateral)):
            laterals.append(lateral(quant(inputs[i])))
        t32 = laterals[2]
        t16 = self.merge_mix(self.merge_cat.cat([laterals[1], self.upsample(t32)], dim=1))
        t8 = self.merge_add.add_relu(laterals[0], self.upsample(t16))
        return [t8, t16, t32]

    def anchors(self, height: int, width: int, side: float) -> Tensor:
        return grid_anchors(height, width, side, self.aspect_ratios, self.image_size)

    def postprocess(self, logits: Tensor, deltas: Tensor, anchors: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        return select_detections(
            logits, deltas, anchors, self.score_threshold, self.top_k, self.num_classes, self.box_weights,
            self.image_size, self.nms_iou_threshold, self.max_detections,
        )

    def fuse(self) -> None:
        for m in list(self.modules()):  # fusing replaces children: walk a snapshot
            if isinstance(m, (ConvBNReLU, Predictor)):
                m.fuse()


def build() -> nn.Module:
    """The converted model, its weights packed for the current quantized engine."""
    torch.manual_seed(SEED)
    model = QuantizedDetectionHead()
    calibration = seeded_batches(feature_shapes(), CALIBRATION_BATCHES, SEED + 2)
    return quantize_static(model, QuantizedDetectionHead.fuse, calibration, QENGINE)


def feature_shapes() -> tuple[tuple[int, ...], ...]:
    return tuple((1, channels, size, size) for channels, size in zip(LEVEL_CHANNELS, LEVEL_SIZES))


def example_inputs() -> tuple[Tensor, ...]:
    generator = torch.Generator().manual_seed(SEED + 1)
    return tuple(torch.rand(*shape, generator=generator) for shape in feature_shapes())


def output_scale() -> float:
    """The largest quantization step of the predictors' outputs (logits and deltas) before decoding.

    Boxes and scores are float functions of those steps and the labels are decisions, so this is a bound on
    float noise in decoding rather than a model of a one-step change: with the engine the model was exported
    with, the quantized predictions are identical and so are the detections."""
    with quantized_engine(QENGINE):
        return max(dequantized_scales(build(), example_inputs()))
