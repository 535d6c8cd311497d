"""The table of named test models. Adding a model means adding one `ModelSpec` here."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from test_models import mobilenet_v2


@dataclass(frozen=True)
class ModelSpec:
    """How to build one test model and the inputs it is checked on."""

    name: str
    build: Callable[[], torch.nn.Module]
    example_inputs: Callable[[], tuple[torch.Tensor, ...]]
    # torch.jit.freeze folds conv + batch norm; a deployed model would be frozen too.
    freeze: bool = True


MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec("mobilenet_v2", mobilenet_v2.build, mobilenet_v2.example_inputs),
    )
}


def model_names() -> list[str]:
    return sorted(MODELS)


def get_model(name: str) -> ModelSpec:
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(f"unknown test model {name!r}; registered models: {', '.join(model_names())}") from None
