"""Batch norms with statistics far from the identity's, for the test models that carry them: a batch norm the
bind-time stage folded wrongly (or not at all) then changes the outputs well beyond 1e-5."""
from __future__ import annotations

import torch
from torch import nn


def randomize_batch_norms(model: nn.Module) -> nn.Module:
    """Draws every BatchNorm2d's affine parameters and running statistics from the global generator."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.BatchNorm2d):
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.2, 0.2)
                module.running_mean.uniform_(-0.3, 0.3)
                module.running_var.uniform_(0.5, 2.0)
    return model
