"""The operators tests/differential_models.py's random models call that no other test model brings into the build.

In-place arithmetic and activations on intermediate values (add_, mul_, sub_, clamp_, sigmoid_, tanh_, copy_,
zero_), ReLU6 as hardtanh and as relu6/relu6_ (F.relu6), tanh, mean over dims, and
dropout/bernoulli with a probability. The differential models are generated at test time, so their operators
are registered here once, through a model that calls each of them on small tensors.
"""
from __future__ import annotations

import torch
from torch import nn
import torch.nn.functional as F  # noqa: N812

SEED = 0


class DifferentialOps(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        y = x * 1.0
        y.add_(x)
        y.add_(1.5)
        y.mul_(x)
        y.mul_(0.5)
        y.sub_(x)
        y.div_(2.0)
        y.clamp_(-3.0, 3.0)
        y.sigmoid_()
        y.tanh_()
        y.relu_()
        z = torch.tanh(x) + torch._C._nn.hardtanh(x, 0.0, 6.0) + torch._C._nn.relu6(x) + torch.mean(x, [1], True)
        torch._C._nn.relu6_(z)
        w = torch.zeros_like(x)
        w.copy_(z)
        v = torch.empty_like(x)
        v.zero_()
        # p=0 and p=1: the draws are made, and the results are exact.
        kept = F.dropout(x, 0.0, True) + torch.bernoulli(x, 1.0) + torch.rand_like(x) * 0.0
        return y + w + v, kept, torch.randn(x.size()).abs() * 0.0  # abs: a negative draw times 0.0 is -0.0


def build() -> nn.Module:
    return DifferentialOps().eval()


def example_inputs() -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(SEED)
    return (torch.randn(2, 3, 4, 4, generator=generator),)
