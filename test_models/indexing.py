"""Indexing: the schema types Tensor?[] (optional-tensor lists), Tensor? and bool, and Scalar fill values.

Exercises aten::index_put_ (from `x[idx] = v` and from torch.index_put_ with accumulate=True and False),
aten::index.Tensor (advanced indexing `x[idx0, :, idx1]`, whose index list holds a None, and a boolean
mask `x[mask]`), index_select, gather, scatter_ (src tensor and Scalar value), masked_fill with a Scalar
and torch.where. The index tensors are built from fixed values so every output is deterministic.
"""
from __future__ import annotations

import torch
from torch import nn

SEED = 0


class Indexing(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        # x: [4, 3, 5]
        rows = torch.tensor([2, 0], dtype=torch.long)
        cols = torch.tensor([4, 1], dtype=torch.long)

        # x[idx] = v becomes index_put_ with a one-element Tensor?[] index list.
        assigned = x.clone()
        assigned[rows] = x[0] * 2.0

        # accumulate=True adds both updates into row 1; accumulate=False gets distinct rows, since which of
        # two duplicate writes wins is unspecified. Python's torch.index_put_ scripts to the Tensor[]
        # overload (index_put_.hacked_twin); `x[i] = v` above uses the Tensor?[] one.
        updates = x[1:3]
        accumulated = torch.index_put_(x.clone(), [torch.tensor([1, 1])], updates, accumulate=True)
        overwritten = torch.index_put_(x.clone(), [torch.tensor([3, 0])], updates, accumulate=False)

        # Advanced indexing with a None in the middle of the index list: result [2, 3].
        picked = x[rows, :, cols]
        # Boolean mask indexing: a 1-D tensor of the positive elements.
        positive = x[x > 0]

        selected = torch.index_select(x, 2, cols)
        gathered = torch.gather(x, 1, torch.zeros_like(x, dtype=torch.long)[:, :2, :])
        scattered = torch.zeros_like(x).scatter_(1, torch.ones(4, 1, 5, dtype=torch.long), x[:, :1, :])
        scattered = scattered.scatter_(2, torch.zeros(4, 3, 1, dtype=torch.long), -1.0)
        masked = x.masked_fill(x < -0.5, 0.25)
        chosen = torch.where(x > 0, x, selected.sum(2, keepdim=True))

        combined = assigned + accumulated + overwritten + scattered + masked + chosen
        return combined, picked, positive, selected, gathered


def build() -> nn.Module:
    torch.manual_seed(SEED)
    return Indexing().eval()


def example_inputs() -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(SEED + 1)
    return (torch.randn(4, 3, 5, generator=generator),)
