"""Arithmetic: the schema types Scalar, Scalar? (clamp bounds), Tensor? (clamp tensor bounds), str? (div's
rounding_mode), out= tensors, and ops returning numbers (int, float, bool) rather than tensors.

Exercises aten::add/sub with alpha, rsub with a Scalar, div with rounding_mode 'floor', 'trunc' and None, div with out=
(the buffer made in forward), mul/add with a Scalar, pow (Tensor and Scalar exponents), clamp with min only,
max only, both, and tensor bounds, `.item()` and float()/int() of tensors used as numbers, torch.where,
comparisons returning bool tensors, dim() and numel(). `x.dim()` is no operator in the lite interpreter (it
is the DIM instruction), so it does not appear in the model's operator list.
"""
from __future__ import annotations

import torch
from torch import nn

SEED = 0


class Arithmetic(nn.Module):
    def forward(
        self, a: torch.Tensor, b: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, float, int, bool]:
        added = torch.add(a, b, alpha=2)
        subtracted = torch.sub(a, b, alpha=0.5)
        # TorchScript rewrites rsub with a tensor `other` to aten::sub with swapped operands; the Scalar
        # overload stays aten::rsub.Scalar.
        reversed_sub = torch.rsub(a, b, alpha=3) + torch.rsub(a, 2.0, alpha=0.5)
        scaled = a * 1.5 + 2
        powers = torch.pow(a.abs() + 1.0, b) + torch.pow(a, 2)

        # b is kept away from zero by example_inputs, so no division is by ~0.
        floor_div = torch.div(a * 4.0, b, rounding_mode="floor")
        trunc_div = torch.div(a * 4.0, b, rounding_mode="trunc")
        true_div = torch.div(a, b, rounding_mode=None) + a / b
        out_buffer = torch.empty_like(a)
        torch.div(a, b, out=out_buffer)
        out_rounded = torch.zeros_like(a)
        torch.div(a * 4.0, b, rounding_mode="floor", out=out_rounded)

        clamped = torch.clamp(a, min=-0.5) + torch.clamp(a, max=0.5) + torch.clamp(a, -0.25, 0.25)
        clamped_by = torch.clamp(a, min=b.abs().neg(), max=b.abs())

        # Numbers taken out of tensors and used in arithmetic on the TorchScript side.
        total = a.sum().item()
        largest = float(b.abs().max())
        positives = int((a > 0).sum())
        shift = total / (positives + 1) + largest
        is_large = bool(a.abs().max() > 1.0)

        greater = a > b
        equal_or_less = torch.le(a, b)
        chosen = torch.where(greater, a, b) + equal_or_less.to(a.dtype)

        elementwise = added + subtracted + reversed_sub + scaled + powers + shift
        divided = floor_div + trunc_div + true_div + out_buffer + out_rounded
        return elementwise, divided, clamped + clamped_by, chosen, total, a.dim() * a.numel(), is_large


def build() -> nn.Module:
    torch.manual_seed(SEED)
    return Arithmetic().eval()


def example_inputs() -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(SEED + 1)
    a = torch.randn(3, 4, generator=generator)
    magnitude = torch.rand(3, 4, generator=generator) + 0.5
    sign = torch.where(torch.rand(3, 4, generator=generator) > 0.5, 1.0, -1.0)
    return a, magnitude * sign
