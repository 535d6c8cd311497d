"""Micro benchmark: a TorchScript loop of 2000 additions of 1-element tensors.

The arithmetic is trivial, so the time and instructions go to calling the operator: the interpreter's
instruction loop, taking the arguments off the stack, dispatch, and allocating the 1-element result.
`benchmarks/` measures it under static and dynamic dispatch against the same kernel called from C++
(`benchmarks/kernel_floor.cpp` mirrors LOOP_ITERATIONS and OPS_PER_ITERATION).

Not frozen (freezing unrolls the loop 8 times), and nothing in it is a constant: the loop runs 2000 times.
"""
from __future__ import annotations

import torch
from torch import nn

SEED = 0
LOOP_ITERATIONS = 2000
# The native operator calls one loop iteration makes, in order.
OPS_PER_ITERATION: tuple[str, ...] = ("aten::add.Tensor",)


class AddLoop(nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        for _ in range(2000):  # LOOP_ITERATIONS; TorchScript needs the literal
            x = x + y
        return x


def build() -> nn.Module:
    return AddLoop().eval()


def example_inputs() -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(SEED)
    return torch.randn(1, generator=generator), torch.randn(1, generator=generator) * 1e-3
