"""Tensor factories: the schema types ScalarType?, Layout?, Device?, bool? (pin_memory) and Scalar fill values.

Exercises aten::zeros, ones, full, arange (start/end/step), empty + fill_, eye, the `*_like` factories with a
dtype, `.to(dtype)` and the tensor-literal path (aten::tensor), each called with explicit dtype=, layout=,
device= (as a torch.device and as the string "cpu") and pin_memory=. Every size is read from the input so
that torch.jit.freeze cannot fold a factory into a constant and drop the op from the model.
"""
from __future__ import annotations

import torch
from torch import nn

SEED = 0


class TensorCreation(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        rows, cols = x.size(0), x.size(1)
        cpu = torch.device("cpu")
        zeros = torch.zeros([rows, cols], dtype=torch.float32, layout=torch.strided, device=cpu, pin_memory=False)
        ones = torch.ones([rows, cols], dtype=torch.float64, layout=torch.strided, device="cpu", pin_memory=False)
        full = torch.full([rows, cols], 0.5, dtype=torch.float32, layout=torch.strided, device=cpu, pin_memory=False)
        filled = torch.empty([rows, cols], dtype=torch.float32, layout=torch.strided, device=cpu, pin_memory=False)
        filled.fill_(2.0)
        eye = torch.eye(rows, cols, dtype=torch.float32, layout=torch.strided, device=cpu, pin_memory=False)
        # arange with Scalar start/end/step and an integer dtype, then converted back.
        steps = torch.arange(0, cols * 2, 2, dtype=torch.int64, layout=torch.strided, device=cpu, pin_memory=False)
        # A list literal becomes aten::tensor, which TorchScript implements itself (not a native function).
        literal = torch.tensor([float(rows), -1.0], dtype=torch.float32, device=cpu)

        mixed = x + zeros + ones.to(torch.float32) + full * filled + eye + steps.to(x.dtype)

        # *_like factories take the shape from `x` and an explicit ScalarType.
        like_ones = torch.ones_like(x, dtype=torch.float64)
        like_zeros = torch.zeros_like(x, dtype=torch.int32)
        like_full = torch.full_like(x, 3, dtype=torch.int64)
        like = like_ones + like_zeros.to(torch.float64) + like_full.to(dtype=torch.float64)

        counts = (x > 0).to(torch.int64).sum(0)
        return mixed, like, counts, literal


def build() -> nn.Module:
    torch.manual_seed(SEED)
    return TensorCreation().eval()


def example_inputs() -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(SEED + 1)
    return (torch.randn(4, 5, generator=generator),)
