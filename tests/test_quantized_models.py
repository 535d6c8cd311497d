"""Quantized models in lite_predictor: static dispatch bit for bit against the stock interpreter under the
same quantized engine, within one quantization step of eager PyTorch, every operator's path reported, and
the engine chosen at load (packed weights are rebuilt for it)."""
from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from predictor_runner import run_predictor
from test_models import MODELS, quantized_detection_head, quantized_lstm, quantized_mobilenet_v2
from test_models.torchvision_ops import ensure_torchvision_ops
from tools.jit_ops import dispatcher_has_operator, jit_operator_names
from tools.quantized_ops import load_quantized_ops

QUANTIZED_MODELS = sorted(name for name, spec in MODELS.items() if spec.qengine is not None)

# One quantization step of each model's outputs, the tolerance against eager PyTorch (see each function).
OUTPUT_SCALE: dict[str, Callable[[], float]] = {
    "quantized_mobilenet_v2": quantized_mobilenet_v2.output_scale,
    "quantized_detection_head": quantized_detection_head.output_scale,
    "quantized_detection_head_unfrozen": quantized_detection_head.output_scale,
    "quantized_lstm": quantized_lstm.output_scale,
}

# Operators whose LibTorch implementation is not exported (a template or a function local to its .cpp), so
# their generated function calls them through the c10 dispatcher and lite_predictor reports it, with why:
# quantized_ops.yaml's `dispatcher` entries, by name and reason.
DISPATCHER_ALLOWED: dict[str, str] = {
    name: op.dispatcher_reason for name, op in load_quantized_ops().items() if op.dispatcher_reason is not None
}

# What a deployed model is: frozen, and every operator it calls bound to a kernel, none through the dispatcher.
NO_DISPATCHER_MODELS = ("quantized_mobilenet_v2",)

OTHER_ENGINES = ("qnnpack", "fbgemm", "onednn")


def engine_of(name: str) -> str:
    engine = MODELS[name].qengine
    assert engine is not None
    return engine


def exported(models_dir: Path, name: str) -> Path:
    model = models_dir / f"{name}.ptl"
    if not model.is_file():
        pytest.fail(f"{model} is missing: run python scripts/dump_ops.py (./build.sh does) to export {name}")
    return model


def flat_tensors(value: object) -> list[torch.Tensor]:
    """The tensors of a saved output, in order, whether saved flat or with the model's output structure."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in flat_tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in flat_tensors(v)]
    raise TypeError(f"unexpected {type(value).__name__} in saved outputs")


def run_and_save(predictor: Path, model: Path, engine: str, mode: str, out: Path) -> dict:
    run = run_predictor(predictor, model, "--qengine", engine, "--dispatch", mode, "--iters", "1", "--warmup", "0",
                        "--json", "--save-outputs", out)
    assert run.returncode == 0, run.stderr
    return run.json()


def assert_bitwise_equal(a_file: Path, b_file: Path) -> None:
    a_outputs, b_outputs = flat_tensors(torch.load(a_file)), flat_tensors(torch.load(b_file))
    assert len(a_outputs) == len(b_outputs) > 0
    for a, b in zip(a_outputs, b_outputs):
        assert a.dtype == b.dtype and a.shape == b.shape
        # Bitwise, NaNs included: compare the raw bytes.
        assert a.contiguous().reshape(-1).view(torch.uint8).equal(b.contiguous().reshape(-1).view(torch.uint8))


def reported_ops(predictor: Path, models_dir: Path, name: str) -> list[dict]:
    run = run_predictor(predictor, exported(models_dir, name), "--qengine", engine_of(name), "--iters", "1",
                        "--warmup", "0", "--json")
    assert run.returncode == 0, run.stderr
    return run.json()["ops"]


def test_every_quantized_model_has_an_output_scale() -> None:
    assert QUANTIZED_MODELS and sorted(OUTPUT_SCALE) == QUANTIZED_MODELS


def test_an_unfrozen_quantized_model_is_registered() -> None:
    # Its convs' __setstate__ calls quantized::conv2d_prepack at load, which frozen models never do.
    assert any(not MODELS[name].freeze for name in QUANTIZED_MODELS)


@pytest.mark.parametrize("name", QUANTIZED_MODELS)
def test_static_equals_dynamic_bit_for_bit_under_the_export_engine(
    name: str, predictor: Path, models_dir: Path, tmp_path: Path
) -> None:
    model, engine = exported(models_dir, name), engine_of(name)
    run_and_save(predictor, model, engine, "static", tmp_path / "static.pt")
    run_and_save(predictor, model, engine, "dynamic", tmp_path / "dynamic.pt")
    assert_bitwise_equal(tmp_path / "static.pt", tmp_path / "dynamic.pt")


@pytest.mark.parametrize("name", QUANTIZED_MODELS)
def test_static_matches_eager_within_one_quantization_step(name: str, predictor: Path, models_dir: Path) -> None:
    scale = OUTPUT_SCALE[name]()
    assert 0 < scale < 1
    run = run_predictor(predictor, exported(models_dir, name), "--qengine", engine_of(name), "--atol", scale,
                        "--rtol", 0, "--iters", "1", "--warmup", "0", "--json")
    assert run.returncode == 0, run.stderr
    report = run.json()
    assert report["outputs_match"] is True, report["mismatch"]  # |static - eager| <= scale elementwise


@pytest.mark.parametrize("name", QUANTIZED_MODELS)
def test_every_operator_runs_static_unless_it_is_jit_native_or_allowed_through_the_dispatcher(
    name: str, predictor: Path, models_dir: Path
) -> None:
    ensure_torchvision_ops()  # so that the dispatcher knows torchvision::nms here too
    jit_ops = jit_operator_names()
    for op in reported_ops(predictor, models_dir, name):
        if not dispatcher_has_operator(op["name"]):
            assert op["path"] == "jit" and op["name"] in jit_ops, op
        elif op["name"] in DISPATCHER_ALLOWED:
            assert op["path"] in ("static", "dispatcher"), op
        else:
            assert op["path"] == "static", op


@pytest.mark.parametrize("name", QUANTIZED_MODELS)
def test_an_operator_reported_as_dispatcher_is_allowed_and_says_why(
    name: str, predictor: Path, models_dir: Path
) -> None:
    for op in reported_ops(predictor, models_dir, name):
        if op["path"] == "dispatcher":
            assert op["name"] in DISPATCHER_ALLOWED, op
            assert op.get("reason") == DISPATCHER_ALLOWED[op["name"]], op


@pytest.mark.parametrize("name", NO_DISPATCHER_MODELS)
def test_frozen_quantized_mobilenet_calls_nothing_through_the_dispatcher(
    name: str, predictor: Path, models_dir: Path
) -> None:
    assert MODELS[name].freeze
    assert [op for op in reported_ops(predictor, models_dir, name) if op["path"] == "dispatcher"] == []


def test_unknown_quantized_engine_is_a_usage_error_listing_the_supported_ones(
    predictor: Path, models_dir: Path
) -> None:
    run = run_predictor(predictor, exported(models_dir, "quantized_mobilenet_v2"), "--qengine", "bogus",
                        "--iters", "1", "--warmup", "0")
    assert run.returncode == 2, run.stderr
    assert "bogus" in run.stderr and "qnnpack" in run.stderr and "x86" in run.stderr


@pytest.mark.parametrize("engine", OTHER_ENGINES)
@pytest.mark.parametrize("name", QUANTIZED_MODELS)
def test_another_engine_rebuilds_packed_weights_and_static_still_equals_dynamic(
    name: str, engine: str, predictor: Path, models_dir: Path, tmp_path: Path
) -> None:
    if engine == engine_of(name):
        pytest.skip(f"{name} was exported under {engine}")
    if engine not in torch.backends.quantized.supported_engines:
        pytest.skip(f"this torch has no {engine} engine")
    # Without the eager reference beside it: under another engine outputs may be more than a step away.
    model = tmp_path / f"{name}.ptl"
    shutil.copyfile(exported(models_dir, name), model)
    shutil.copyfile(models_dir / f"{name}.inputs.pt", tmp_path / f"{name}.inputs.pt")
    static = run_and_save(predictor, model, engine, "static", tmp_path / "static.pt")
    dynamic = run_and_save(predictor, model, engine, "dynamic", tmp_path / "dynamic.pt")
    assert static["qengine"] == dynamic["qengine"] == engine
    assert_bitwise_equal(tmp_path / "static.pt", tmp_path / "dynamic.pt")
