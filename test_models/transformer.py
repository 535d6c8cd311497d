"""A transformer encoder layer with a key padding mask: a bool tensor passed as Tensor?, and the ops
scripted multi-head attention decomposes into.

nn.TransformerEncoderLayer (d_model 32, 4 heads, batch_first, dropout 0) in eval mode, called with
src_key_padding_mask marking the last positions of the shorter sequence as padding. The mask is computed
from a lengths input, so freezing cannot fold it. The padded positions' outputs are compared too: with a
key mask only, every query still attends to some unpadded key.

It scripts as is. The scripted forward keeps PyTorch's runtime choice between the fused "fast path"
(aten::_transformer_encoder_layer_fwd, taken when grad mode is off) and the decomposed one (layer_norm,
linear, aten::scaled_dot_product_attention; taken when grad mode is on), so the model lists the operators
of both, plus MultiheadAttention's own fused branch (aten::_native_multi_head_attention), which this layer
never takes. Eager, TorchScript and the lite interpreter take the same path in the same grad mode, and the
two paths agree to within 1e-6 here.
"""
from __future__ import annotations

import torch
from torch import nn

SEED = 0
D_MODEL = 32
NHEAD = 4
SEQUENCE_LENGTHS = (6, 4)  # the second sequence is padded to the first's length


class Transformer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(D_MODEL, NHEAD, dim_feedforward=64, dropout=0.0, batch_first=True)

    def forward(self, src: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        # src: [batch, time, D_MODEL]; lengths: [batch] int64. True marks a padded key.
        positions = torch.arange(src.size(1), dtype=torch.int64, device=src.device)
        padding_mask = positions.unsqueeze(0) >= lengths.unsqueeze(1)
        return self.layer(src, src_key_padding_mask=padding_mask)


def build() -> nn.Module:
    torch.manual_seed(SEED)
    return Transformer().eval()


def example_inputs() -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(SEED + 1)
    src = torch.randn(len(SEQUENCE_LENGTHS), max(SEQUENCE_LENGTHS), D_MODEL, generator=generator)
    return src, torch.tensor(SEQUENCE_LENGTHS, dtype=torch.int64)
