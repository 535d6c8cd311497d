"""Every kind of argument a TorchScript forward takes, most of them defaulted, and a structured result.

Shaped like torchvision's RAFT, the motivating case: two images and `num_flow_updates: int = 12`, so an
inputs file holding just the two images runs with the method's defaults. The other arguments cover the
remaining argument types an inputs file can hold: a float, a bool, an int list, an optional tensor and an
optional dict of tensors (TorchScript refuses a list default, so
`sizes` is an optional int list). The result is a named tuple of a tensor list (one flow per update, as RAFT
returns), a dict and an int, so the predictor's output flattening and --save-outputs see every
container kind.

The example inputs give the images and four of the defaulted arguments and leave `bias` and `extras`
out, so the inputs file dump_ops.py writes needs its trailing defaults filled.
"""
from __future__ import annotations

from typing import Dict, List, NamedTuple, Optional

import torch
from torch import Tensor, nn

SEED = 0


class FlowUpdates(NamedTuple):
    flows: List[Tensor]  # after each update, as RAFT returns its flow predictions
    summary: Dict[str, Tensor]
    updates: int


class TypedArguments(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Conv2d(3, 2, kernel_size=3, padding=1)

    def forward(
        self,
        image1: Tensor,
        image2: Tensor,
        num_flow_updates: int = 12,
        scale: float = 0.5,
        flip: bool = False,
        sizes: Optional[List[int]] = None,  # TorchScript refuses mutable defaults: None means [2, 2]
        bias: Optional[Tensor] = None,
        extras: Optional[Dict[str, Tensor]] = None,
    ) -> FlowUpdates:
        motion = self.encoder(image2) - self.encoder(image1)
        flow = torch.zeros_like(motion)
        flows: List[Tensor] = []
        for _ in range(num_flow_updates):
            residual = motion - flow
            if bias is not None:
                residual = residual + bias
            delta = torch.sigmoid(residual) + -0.5
            if flip:
                delta = delta.neg()
            flow = flow + delta * scale
            flows.append(flow)
        pooled_size = [2, 2] if sizes is None else sizes
        summary: Dict[str, Tensor] = {"pooled": nn.functional.adaptive_avg_pool2d(flow, pooled_size)}
        if extras is not None:
            for name, value in extras.items():
                summary[name] = value * scale
        return FlowUpdates(flows, summary, num_flow_updates)


def build() -> nn.Module:
    torch.manual_seed(SEED)
    return TypedArguments().eval()


def images() -> tuple[Tensor, Tensor]:
    """The two images alone, as a RAFT caller passes them."""
    generator = torch.Generator().manual_seed(SEED + 1)
    return torch.randn(1, 3, 8, 8, generator=generator), torch.randn(1, 3, 8, 8, generator=generator)


def example_inputs() -> tuple[object, ...]:
    """num_flow_updates, scale, flip and sizes given; bias and extras left to their defaults."""
    return (*images(), 4, 0.25, True, [3, 1])
