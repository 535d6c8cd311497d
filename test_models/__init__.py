"""Registry of the models this project exports, each with seeded example inputs.

A model is registered by name; `scripts/dump_ops.py` scripts every registered model, saves it for the lite
interpreter and records the operators it calls.
"""
from test_models.registry import MODELS, ModelSpec, get_model, model_names

__all__ = ["MODELS", "ModelSpec", "get_model", "model_names"]
