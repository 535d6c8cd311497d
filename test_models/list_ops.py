"""Tensor lists in and out: the schema types Tensor[] (arguments and returns), int[] split sizes and the
multi-tensor tuple returns (Tensor values, Tensor indices).

Exercises aten::cat and aten::stack over Tensor[], aten::topk, max.dim, min.dim and sort returning
(values, indices), unbind, split (one size and a list of sizes) and chunk returning Tensor[] that are summed
or concatenated back, meshgrid (with indexing=) and broadcast_tensors. The input is a permutation of
distinct values, so no ranking has ties that float error could reorder.
"""
from __future__ import annotations

import torch
from torch import nn

SEED = 0


class ListOps(nn.Module):
    def forward(
        self, x: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
        # x: [4, 6], distinct values
        joined = torch.cat([x, x * 2.0], dim=1)
        stacked = torch.stack([x, x.neg()], dim=0)

        top_values, top_indices = torch.topk(x, 3, dim=1)
        max_values, max_indices = torch.max(x, dim=1)
        min_values, min_indices = torch.min(x, dim=0, keepdim=True)
        sorted_values, sorted_indices = torch.sort(x, dim=1, descending=True)
        rankings = torch.cat([top_indices, max_indices.unsqueeze(1), sorted_indices], dim=1) + min_indices.sum()
        extremes = top_values.sum(1) + max_values + min_values.sum() + sorted_values[:, 0]

        row_sum = torch.zeros_like(x[0])
        for row in torch.unbind(x, dim=0):
            row_sum = row_sum + row
        halves = torch.split(x, 3, dim=1)
        uneven = torch.split(x, [1, 2, 3], dim=1)
        rebuilt = torch.cat(torch.chunk(x, 2, dim=0), dim=0) + torch.cat([halves[1], halves[0]], dim=1)

        grid_rows, grid_cols = torch.meshgrid(x[:, 0], x[0], indexing="ij")
        broadcast = list(torch.broadcast_tensors(x[:, :1], x[:1, :]))  # eager returns a tuple
        combined = joined[:, :6] + stacked.sum(0) + grid_rows * grid_cols + row_sum
        return combined, rankings, extremes, rebuilt, list(uneven), broadcast


def build() -> nn.Module:
    torch.manual_seed(SEED)
    return ListOps().eval()


def example_inputs() -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(SEED + 1)
    return (torch.randperm(24, generator=generator).to(torch.float32).reshape(4, 6) / 8.0,)
