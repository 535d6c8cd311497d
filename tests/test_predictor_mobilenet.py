"""MobileNetV2 end to end: lite_predictor with generated kernels against eager PyTorch and the stock path."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from predictor_runner import run_predictor
from scripts.dump_ops import flatten_outputs
from test_models import get_model
from tools.jit_ops import jit_operator_names
from tools.native_ops import load_native_catalog

MODEL = "mobilenet_v2"


@pytest.fixture(scope="module")
def static_report(predictor: Path, models_dir: Path) -> dict:
    run = run_predictor(predictor, models_dir / f"{MODEL}.ptl", "--json", "--atol", "1e-5", "--iters", "2")
    assert run.returncode == 0, run.stderr
    return run.json()


def test_matches_eager_within_1e_5(static_report: dict) -> None:
    assert static_report["outputs_match"] is True
    assert static_report["max_abs_diff"] <= 1e-5


def test_reference_outputs_are_eager_pytorch(models_dir: Path) -> None:
    # The .expected.pt the predictor compares with must be eager PyTorch's answer, not the interpreter's.
    spec = get_model(MODEL)
    with torch.no_grad():
        eager = flatten_outputs(spec.build()(*spec.example_inputs()))
    saved = torch.load(models_dir / f"{MODEL}.expected.pt")
    assert len(saved) == len(eager) == 1
    assert torch.equal(saved[0], eager[0])


def test_every_native_op_takes_the_static_path(static_report: dict) -> None:
    catalog = load_native_catalog()
    paths = {op["name"]: op["path"] for op in static_report["ops"]}
    native = {name for name in paths if name in catalog}
    assert native >= {"aten::conv2d", "aten::add.Tensor", "aten::hardtanh_", "aten::linear"}
    assert {paths[name] for name in native} == {"static"}
    jit_native = set(paths) - native
    assert jit_native <= jit_operator_names()
    assert {paths[name] for name in jit_native} == {"jit"}


def test_report_has_the_documented_fields(static_report: dict) -> None:
    for key in ("model", "dispatch", "ops", "outputs_match", "max_abs_diff", "load_ms", "first_run_ms", "median_ms"):
        assert key in static_report
    assert static_report["dispatch"] == "static"
    assert static_report["load_ms"] > 0 and static_report["median_ms"] > 0


def test_static_outputs_equal_dynamic_outputs_bit_for_bit(predictor: Path, models_dir: Path, tmp_path: Path) -> None:
    outputs = {}
    for mode in ("static", "dynamic"):
        path = tmp_path / f"{mode}.pt"
        run = run_predictor(
            predictor, models_dir / f"{MODEL}.ptl", "--dispatch", mode, "--iters", "1", "--save-outputs", path,
            *(["--no-specialize"] if mode == "static" else []),  # the bind-time stage is held to 1e-5, not bits
        )
        assert run.returncode == 0, run.stderr
        outputs[mode] = flatten_outputs(torch.load(path))  # saved as the model returns it: one tensor
    assert len(outputs["static"]) == len(outputs["dynamic"]) == 1
    static, dynamic = outputs["static"][0], outputs["dynamic"][0]
    assert static.dtype == dynamic.dtype and static.shape == dynamic.shape
    assert torch.equal(static.view(torch.int32), dynamic.view(torch.int32))


def test_dynamic_mode_reports_the_dispatcher_path(predictor: Path, models_dir: Path) -> None:
    run = run_predictor(predictor, models_dir / f"{MODEL}.ptl", "--dispatch", "dynamic", "--json", "--iters", "1")
    assert run.returncode == 0, run.stderr
    paths = {op["name"]: op["path"] for op in run.json()["ops"]}
    assert paths["aten::conv2d"] == "dispatcher"
    assert paths["aten::size"] == "jit"


def test_readable_summary_states_the_verdict(predictor: Path, models_dir: Path) -> None:
    run = run_predictor(predictor, models_dir / f"{MODEL}.ptl", "--iters", "1")
    assert run.returncode == 0, run.stderr
    assert "result:    MATCH" in run.stdout
    assert "static      aten::conv2d" in run.stdout
