"""Every registered test model in lite_predictor: static dispatch against eager PyTorch and bit for bit
against the stock interpreter, with every native operator on the static path. Bit for bit holds for the
generated kernels, so the static run here is --no-specialize (the bind-time stage's kernels are held to 1e-5 in
test_bind_time_kernels)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from predictor_runner import run_predictor
from scripts.dump_ops import flatten_outputs
from test_models import model_names
from tools.custom_ops import load_custom_ops
from tools.jit_ops import jit_operator_names
from tools.native_ops import load_native_catalog
from tools.quantized_ops import load_quantized_ops


def run_and_save(predictor: Path, model: Path, mode: str, out: Path, *flags: str) -> dict:
    run = run_predictor(predictor, model, "--dispatch", mode, "--iters", "1", "--warmup", "0", "--json",
                        "--save-outputs", out, *flags)
    assert run.returncode == 0, run.stderr
    return run.json()


@pytest.mark.parametrize("name", model_names())
def test_static_matches_eager_and_dynamic_bit_for_bit(
    name: str, predictor: Path, models_dir: Path, tmp_path: Path
) -> None:
    model = models_dir / f"{name}.ptl"
    static = run_and_save(predictor, model, "static", tmp_path / "static.pt", "--no-specialize")
    dynamic = run_and_save(predictor, model, "dynamic", tmp_path / "dynamic.pt")
    assert static["outputs_match"] is True, static["mismatch"]  # |a - e| <= 1e-5 + 1e-5 |e| elementwise

    # --save-outputs keeps the outputs' structure; compared flattened, as the predictor compares them.
    static_outputs = flatten_outputs(torch.load(tmp_path / "static.pt"))
    dynamic_outputs = flatten_outputs(torch.load(tmp_path / "dynamic.pt"))
    assert len(static_outputs) == len(dynamic_outputs) == static["num_outputs"] > 0
    for s, d in zip(static_outputs, dynamic_outputs):
        assert s.dtype == d.dtype and s.shape == d.shape
        # Bitwise, NaNs included: compare the raw bytes.
        assert s.contiguous().reshape(-1).view(torch.uint8).equal(d.contiguous().reshape(-1).view(torch.uint8))


@pytest.mark.parametrize("name", model_names())
def test_every_native_op_is_static(name: str, predictor: Path, models_dir: Path) -> None:
    run = run_predictor(predictor, models_dir / f"{name}.ptl", "--iters", "1", "--warmup", "0", "--json")
    assert run.returncode == 0, run.stderr
    catalog = load_native_catalog()
    custom = load_custom_ops()
    quantized = load_quantized_ops()
    jit_ops = jit_operator_names()
    for op in run.json()["ops"]:
        if op["name"] in quantized:
            # quantized_ops.yaml says which of its operators LibTorch exports no entry point for, and why.
            reason = quantized[op["name"]].dispatcher_reason
            assert (op["path"], op.get("reason")) == (("dispatcher", reason) if reason else ("static", None)), op
            continue
        expected = "static" if op["name"] in catalog or op["name"] in custom else "jit"
        assert op["path"] == expected, op
        if expected == "jit":
            assert op["name"] in jit_ops
