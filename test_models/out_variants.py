"""out= variants called with defaulted arguments omitted before the out argument.

The bytecode records how many arguments a call passes. `torch.add(a, b, out=buf)` passes self, other
and out of add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out): the runtime must
insert alpha=1 between `other` and `out`, not after `out`. sum.IntList_out omits keepdim and dtype;
mean.out omits keepdim and dtype. The outputs are the buffers, written in place.
"""
from __future__ import annotations

import torch
from torch import nn

SEED = 0


class OutVariants(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        added = torch.empty_like(a)
        torch.add(a, b, out=added)
        # Zero-element buffers: out= resizes them to the result's shape without a deprecation warning.
        summed = a.new_empty([0])
        torch.sum(a * b, [0], out=summed)
        averaged = a.new_empty([0])
        torch.mean(a - b, [1], out=averaged)
        return added, summed, averaged


def build() -> nn.Module:
    torch.manual_seed(SEED)
    return OutVariants().eval()


def example_inputs() -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(SEED + 1)
    return torch.randn(3, 4, generator=generator), torch.randn(3, 4, generator=generator)
