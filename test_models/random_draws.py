"""Random-number operators, none of which takes a Generator argument in the bytecode.

Every operator native_functions.yaml tags `nondeterministic_seeded` that a model commonly calls without a
generator: rand, randn, randint, randperm, rand_like, randn_like, normal, bernoulli, multinomial, dropout, and
the in-place uniform_, normal_ and exponential_. Their sizes come from the input, so freezing folds none of them.

Each draw is reduced to something its distribution fixes exactly (a uniform draw is below 1, a permutation
sorts to arange, a normal draw with std 0 is its mean, ...), so the outputs can be compared with eager
PyTorch while every call still draws. The bind-time stage must never fold these calls or prepare by running
the model a hidden second time (tests/test_stage_correctness.py checks both, with a model whose output is
the noise itself).
"""
from __future__ import annotations

import torch
from torch import nn

SEED = 0


class RandomDraws(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        rows, cols = x.size(0), x.size(1)
        below_one = (torch.rand([rows, cols]) < 1.0).to(torch.float32)
        finite = torch.isfinite(torch.randn([rows, cols]) + torch.randn_like(x)).to(torch.float32)
        in_range = (torch.randint(0, 3, [rows, cols]) < 3).to(torch.float32)
        uniform_like = (torch.rand_like(x) >= 0.0).to(torch.float32)
        ordered = torch.sort(torch.randperm(cols))[0].to(torch.float32)
        at_mean = torch.normal(x, torch.zeros_like(x))
        certain = torch.bernoulli(torch.ones_like(x))
        only_choice = torch.multinomial(torch.tensor([0.0, 1.0, 0.0]), rows, True).to(torch.float32)
        kept = torch.dropout(x, 0.0, True)
        filled = torch.empty([rows, cols])
        filled.uniform_(0.0, 1.0)
        filled.normal_(0.0, 1.0)
        filled.exponential_(1.0)
        positive = (filled >= 0.0).to(torch.float32)
        masks = below_one * finite * in_range * uniform_like * certain * positive
        return masks * x + at_mean + kept, ordered, only_choice, masks


def build() -> nn.Module:
    return RandomDraws().eval()


def example_inputs() -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(SEED)
    return (torch.randn(4, 6, generator=generator),)
