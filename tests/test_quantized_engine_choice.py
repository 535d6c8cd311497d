"""--qengine auto: the bind-time stage packs each quantized conv's and linear's constant weights for LibTorch's other
quantized engines too and runs, per input shape, the fastest packing among those whose results stay within one
quantization step of the loaded engine's (bind_time/quantized_engines.h). Checked here: the other engines really
serve calls, the outputs stay within two output steps of eager PyTorch (each call may move by a step), a packing
that computes something else is left out by the check, and without the flag nothing changes."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from predictor_runner import race_on_environment, run_predictor
from test_models import quantized_detection_head, quantized_mobilenet_v2

# Models whose convs have constant packed weights, and one quantization step of their outputs.
MODELS = {
    "quantized_mobilenet_v2": quantized_mobilenet_v2.output_scale,
    "quantized_detection_head": quantized_detection_head.output_scale,
    "quantized_detection_head_unfrozen": quantized_detection_head.output_scale,
}
WRONG_WEIGHTS_HOOK = "LIGHTWEIGHT_DISPATCH_TEST_ONLY_WRONG_WEIGHTS"

# On x86-64 the stage offers onednn beside the loaded x86 packings; a LibTorch with one engine has nothing to choose.
pytestmark = pytest.mark.skipif(
    "onednn" not in torch.backends.quantized.supported_engines, reason="this LibTorch has no second engine to offer"
)


def model_path(models_dir: Path, name: str) -> Path:
    path = models_dir / f"{name}.ptl"
    if not path.is_file():
        pytest.fail(f"{path} is missing: ./build.sh exports it")
    return path


def run_auto(predictor: Path, model: Path, *args: object, env: dict[str, str] | None = None) -> dict:
    run = run_predictor(predictor, model, "--qengine", "auto", "--iters", "3", "--warmup", "0", "--json", *args,
                        env=env)
    assert run.returncode in (0, 1), run.stderr
    return run.json()


def calls_by_engine(report: dict) -> dict[str, int]:
    totals: dict[str, int] = {}
    for call in report["quantized_engine_calls"]:
        assert len(call["engines"]) == len(call["calls"]), call
        for engine, calls in zip(call["engines"], call["calls"]):
            totals[engine] = totals.get(engine, 0) + calls
    return totals


@pytest.mark.parametrize("prepare", ["first-call", "background"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_other_engines_serve_calls_and_outputs_stay_within_two_steps_of_eager(
    name: str, prepare: str, predictor: Path, models_dir: Path
) -> None:
    step = MODELS[name]()
    report = run_auto(predictor, model_path(models_dir, name), "--prepare", prepare, "--atol", 2 * step, "--rtol", 0)
    assert report["outputs_match"] is True, report["mismatch"]
    assert report["qengine"] == "x86"  # loaded under the default engine
    calls = report["quantized_engine_calls"]
    assert calls and all(call["engines"][0] == "x86" for call in calls)
    totals = calls_by_engine(report)
    # The test hook keeps the first agreeing engine untimed (conftest.py): onednn serves the calls it agrees on.
    assert totals.get("onednn", 0) > 0, totals
    # Every caller's call of a choosing site is counted once, whichever engine served it: each conv runs once a
    # run, so every site that ran counts the same number of calls (at least the timed runs).
    choosing = [call for call in calls if len(call["engines"]) > 1]
    counted = {sum(call["calls"]) for call in choosing if sum(call["calls"]) > 0}
    assert len(counted) == 1 and counted.pop() >= 3, choosing
    rebound = {(site["function"], site["instruction"]) for site in report["call_sites"]
               if site["runs"] == "static+engine_choice"}
    assert rebound == {(call["function"], call["instruction"]) for call in choosing}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_packing_that_computes_something_else_is_left_out(
    name: str, predictor: Path, models_dir: Path, tmp_path: Path
) -> None:
    model = model_path(models_dir, name)
    wrong = os.environ | {WRONG_WEIGHTS_HOOK: "1"}
    report = run_auto(predictor, model, "--prepare", "first-call", "--save-outputs", tmp_path / "auto.pt", env=wrong)
    assert calls_by_engine(report).get("onednn", -1) == 0
    ran = [call for call in report["quantized_engine_calls"] if sum(call["calls"]) > 0]
    assert ran and all(any("onednn left out" in note and "more than one quantization step" in note
                           for note in call["notes"]) for call in ran)
    # Every call then ran its loaded packing: the stock answer, bit for bit.
    stock = run_predictor(predictor, model, "--iters", "1", "--warmup", "0", "--save-outputs", tmp_path / "x86.pt")
    assert stock.returncode in (0, 1), stock.stderr
    for got, expected in zip(torch.load(tmp_path / "auto.pt"), torch.load(tmp_path / "x86.pt")):
        assert torch.equal(got, expected)


def test_the_races_choose_an_engine_for_every_call_and_the_model_check_compares_them(
    predictor: Path, models_dir: Path
) -> None:
    step = MODELS["quantized_mobilenet_v2"]()
    report = run_auto(predictor, model_path(models_dir, "quantized_mobilenet_v2"), "--atol", 2 * step, "--rtol", 0,
                      "--warmup", "4", env=race_on_environment())
    assert report["outputs_match"] is True, report["mismatch"]
    totals = calls_by_engine(report)
    assert sum(totals.values()) > 0 and set(totals) == {"x86", "onednn"}
    checks = report["model_check"]["checks"]
    assert checks and checks[0]["compared"] is True, report["model_check"]


def test_without_auto_no_call_chooses_its_engine(predictor: Path, models_dir: Path) -> None:
    run = run_predictor(predictor, model_path(models_dir, "quantized_mobilenet_v2"), "--iters", "1", "--json")
    assert run.returncode == 0, run.stderr
    report = run.json()
    assert report["quantized_engine_calls"] == []
    assert not [site for site in report["call_sites"] if "engine_choice" in site["runs"]]


@pytest.mark.parametrize("flag", [["--no-specialize"], ["--dispatch", "dynamic"]])
def test_auto_without_the_stage_is_a_usage_error(flag: list[str], predictor: Path, models_dir: Path) -> None:
    run = run_predictor(predictor, model_path(models_dir, "quantized_mobilenet_v2"), "--qengine", "auto", *flag)
    assert run.returncode == 2
    assert "--qengine auto" in run.stderr and "bind-time stage" in run.stderr


def test_a_model_with_nothing_to_choose_says_so(predictor: Path, models_dir: Path) -> None:
    # quantize_dynamic's LSTM and linear: quantized::linear_dynamic, which the choice does not cover.
    model = model_path(models_dir, "quantized_lstm")
    report = run_auto(predictor, model)
    assert report["qengine_auto"] is True and report["quantized_engine_calls"] == []
    text = run_predictor(predictor, model, "--qengine", "auto", "--iters", "1")
    assert "--qengine auto: no quantized::conv2d, conv2d_relu, linear or linear_relu call" in text.stdout
    plain = run_predictor(predictor, model, "--iters", "1", "--json")
    assert plain.json()["qengine_auto"] is False
