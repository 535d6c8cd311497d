"""Small models saved for the lite interpreter, and the fixtures the op-selection tests share: a directory of two
exported models, and an output yaml with previous content (to see that a failure leaves it untouched)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from predictor_runner import save_lite_model


class Relu(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) * 2


class Softmax(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


class Erf(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.erf(x)


@pytest.fixture()
def model_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "exported"
    directory.mkdir()
    save_lite_model(Relu(), directory / "relu_model.ptl")
    save_lite_model(Softmax(), directory / "softmax_model.ptl")
    return directory


@pytest.fixture()
def output(tmp_path: Path) -> Path:
    path = tmp_path / "out.yaml"
    path.write_text("- aten::previous_content\n")
    return path
