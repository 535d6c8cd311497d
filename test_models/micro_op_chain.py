"""Micro benchmark: a loop of small shape and pointwise ops (sigmoid, mul, cat, view, select, slice, sub).

250 iterations of a 9-op chain on 4-element tensors: like the glue between layers of a real model (gating,
concatenation, reshaping, slicing), and dominated by the cost of calling each operator, not by arithmetic.
`benchmarks/kernel_floor.cpp` makes the same kernel calls from C++ (LOOP_ITERATIONS, OPS_PER_ITERATION).

Not frozen (freezing unrolls the loop 8 times), and nothing in it is a constant: every op runs every iteration.
"""
from __future__ import annotations

import torch
from torch import nn

SEED = 0
LOOP_ITERATIONS = 250
# The native operator calls one loop iteration makes, in order.
OPS_PER_ITERATION: tuple[str, ...] = (
    "aten::sigmoid",
    "aten::mul.Tensor",
    "aten::cat",
    "aten::view",
    "aten::select.int",
    "aten::mul.Scalar",
    "aten::slice.Tensor",
    "aten::mul.Scalar",
    "aten::sub.Tensor",
)


class OpChain(nn.Module):
    def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        for _ in range(250):  # LOOP_ITERATIONS; TorchScript needs the literal
            gated = torch.sigmoid(x) * w
            joined = torch.cat([gated, x])  # 8 elements
            rows = joined.view(2, 4)
            # A contraction (|0.5| + |0.25| < 1 with |gated| < |w|): the values stay bounded.
            x = rows[1] * 0.5 - joined[2:6] * 0.25
        return x


def build() -> nn.Module:
    return OpChain().eval()


def example_inputs() -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(SEED)
    return torch.randn(4, generator=generator), torch.randn(4, generator=generator)
