"""Recurrent layers: the schema types Tensor[] (hidden states and flat weight lists), bool/int/float flags
and multi-tensor tuple returns.

Exercises aten::lstm.input (a 2-layer, batch_first nn.LSTM whose (h, c) states come in as a Tensor[]) and
aten::gru.input (a 1-layer nn.GRU given an initial state) over a seeded input, returning the outputs and
the final states.
"""
from __future__ import annotations

import torch
from torch import nn

SEED = 0
INPUT_SIZE = 8
HIDDEN_SIZE = 16


class Recurrent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(INPUT_SIZE, HIDDEN_SIZE, num_layers=2, batch_first=True)
        self.gru = nn.GRU(HIDDEN_SIZE, HIDDEN_SIZE, batch_first=True)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        # x: [batch, time, INPUT_SIZE]. The LSTM starts from zero states (hx omitted); the GRU is given
        # one explicitly, the LSTM's final top-layer hidden state.
        lstm_out, (h, c) = self.lstm(x)
        gru_out, gru_h = self.gru(lstm_out, h[-1:])
        return gru_out, h, c, gru_h


def build() -> nn.Module:
    torch.manual_seed(SEED)
    return Recurrent().eval()


def example_inputs() -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(SEED + 1)
    return (torch.randn(2, 5, INPUT_SIZE, generator=generator),)
