"""A sequence tagger (2-layer LSTM + linear) quantized by eager-mode dynamic quantization.

`torch.ao.quantization.quantize_dynamic` with qint8 replaces the LSTM by one whose weights are int8 and
prepacked (`aten::quantized_lstm.input` with `quantized::linear_dynamic` inside each cell's matmuls) and the
linear by `quantized::linear_dynamic`: activations stay float between layers and are quantized on the fly,
per call, from their own range. Nothing needs calibrating.

Input: a batch of two sequences of 12 steps of 16 features, batch first; weights random from a fixed seed.
Output: per-step class logits [2, 12, 10], floats.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.ao.quantization import quantize_dynamic

from test_models.quantization import DEFAULT_ENGINE, quantized_engine, quiet_workflow

SEED = 0
QENGINE = DEFAULT_ENGINE
BATCH = 2
STEPS = 12
INPUT_SIZE = 16
HIDDEN_SIZE = 32
NUM_CLASSES = 10
# linear_dynamic with reduce_range (as nn.quantized.dynamic.Linear calls it) quantizes its input to 7 bits.
DYNAMIC_ACTIVATION_LEVELS = 127


class SequenceTagger(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(INPUT_SIZE, HIDDEN_SIZE, num_layers=2, batch_first=True)
        self.classifier = nn.Linear(HIDDEN_SIZE, NUM_CLASSES)

    def forward(self, x: Tensor) -> Tensor:
        hidden, _ = self.lstm(x)
        return self.classifier(hidden)


def build() -> nn.Module:
    """The dynamically quantized model, its weights packed for the current quantized engine."""
    torch.manual_seed(SEED)
    model = SequenceTagger().eval()
    with quiet_workflow():
        return quantize_dynamic(model, {nn.LSTM, nn.Linear}, dtype=torch.qint8)


def example_inputs() -> tuple[Tensor, ...]:
    generator = torch.Generator().manual_seed(SEED + 1)
    return (torch.randn(BATCH, STEPS, INPUT_SIZE, generator=generator),)


def output_scale() -> float:
    """How far the logits move when every input of the dynamically quantized classifier moves one step.

    The outputs are never quantized (dynamic quantization returns floats), so this stands in for an output
    step: the classifier's input step on the example inputs, (max(x, 0) - min(x, 0)) / 127, times the largest
    row sum of its dequantized |weight|."""
    with quantized_engine(QENGINE):
        model = build()
        ranges: list[float] = []

        def record(_module: nn.Module, args: tuple[Tensor, ...]) -> None:
            x = args[0]
            ranges.append(max(float(x.max()), 0.0) - min(float(x.min()), 0.0))

        handle = model.classifier.register_forward_pre_hook(record)
        try:
            with torch.no_grad():
                model(*example_inputs())
        finally:
            handle.remove()
        weight_row_sum = float(model.classifier.weight().dequantize().abs().sum(dim=1).max())
    (input_range,) = ranges
    return input_range / DYNAMIC_ACTIVATION_LEVELS * weight_row_sum
