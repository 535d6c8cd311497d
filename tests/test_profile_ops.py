"""lite_predictor --profile-ops: every operator call the model makes is counted, in either loop and either
dispatch mode (the stock loop is the reference), and the report reads sensibly."""
# No `from __future__ import annotations`: TorchScript must see the interface class, not its name.
import json
from pathlib import Path
from typing import Dict, List

import pytest
import torch
from torch import Tensor

from predictor_runner import run_predictor, save_lite_model

MODES = {
    "static": ("--dispatch", "static"),
    "static, stock loop": ("--dispatch", "static", "--interpreter", "stock"),
    "dynamic": ("--dispatch", "dynamic"),
}


@torch.jit.interface
class Step(torch.nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        pass


class Halve(torch.nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return x * 0.5


class LoopWithInterfaceCall(torch.nn.Module):
    """A data-independent loop (3 adds, 3 interface calls each with one mul) and a list of tensors."""

    step: Step

    def __init__(self) -> None:
        super().__init__()
        self.step = Halve()

    def forward(self, x: Tensor) -> Tensor:
        for _ in range(3):
            x = self.step.forward(x) + 1.0
        return torch.cat([x, x.sigmoid()])


def profile(predictor: Path, model: Path, *args: str, iters: int = 3) -> Dict:
    run = run_predictor(predictor, model, "--profile-ops", "--json", "--iters", str(iters), "--warmup", "0", *args)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)["op_profile"]


def calls_per_run(report: Dict) -> Dict[str, float]:
    return {op["op"]: op["calls"] / report["runs"] for op in report["ops"]}


@pytest.fixture(scope="module")
def loop_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("profile")
    model = save_lite_model(LoopWithInterfaceCall(), directory / "loop.ptl")
    torch.save([torch.arange(4, dtype=torch.float32)], directory / "loop.inputs.pt")
    return model


@pytest.mark.parametrize("mode", MODES, ids=list(MODES))
def test_every_operator_call_is_counted(predictor: Path, loop_model: Path, mode: str) -> None:
    counts = calls_per_run(profile(predictor, loop_model, *MODES[mode]))
    # Both loops also report each interface call, under the method's name (as LibTorch's loop does).
    assert counts == {"aten::mul": 3, "aten::add": 3, "forward": 3, "aten::sigmoid": 1, "aten::cat": 1}


@pytest.mark.parametrize("model", ["mobilenet_v2", "detection_ops", "list_ops", "micro_postprocess"])
def test_counts_match_the_stock_loop_in_every_mode(predictor: Path, models_dir: Path, model: str) -> None:
    reference = calls_per_run(profile(predictor, models_dir / f"{model}.ptl", *MODES["static, stock loop"], iters=2))
    assert reference, "the stock loop reported no operator calls"
    for mode in ("static", "dynamic"):
        assert calls_per_run(profile(predictor, models_dir / f"{model}.ptl", *MODES[mode], iters=2)) == reference, mode


def test_mobilenet_v2_profile(predictor: Path, models_dir: Path) -> None:
    report = profile(predictor, models_dir / "mobilenet_v2.ptl", iters=2)
    counts = calls_per_run(report)
    # MobileNetV2: 52 convolutions, 35 ReLU6 (hardtanh_), 10 residual adds, one classifier.
    assert (counts["aten::conv2d"], counts["aten::hardtanh_"], counts["aten::add"], counts["aten::linear"]) == (
        52, 35, 10, 1)
    ops: List[Dict] = report["ops"]
    assert ops[0]["op"] == "aten::conv2d", "convolutions should dominate MobileNetV2's time"
    assert [op["ms_per_run"] for op in ops] == sorted((op["ms_per_run"] for op in ops), reverse=True)
    total = sum(op["ms_per_run"] for op in ops)
    assert 0 < total <= report["ms_per_run"]
    for op in ops:
        assert op["us_per_call"] == pytest.approx(1e3 * op["ms_per_run"] * report["runs"] / op["calls"])


def test_text_report(predictor: Path, loop_model: Path) -> None:
    run = run_predictor(predictor, loop_model, "--profile-ops", "--iters", "2")
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("profile:"))
    assert "5 operator(s) over 2 runs" in lines[header]
    assert lines[header + 1].split() == ["calls", "ms", "%", "run", "us/call", "operator"]
    rows = {line.split()[-1]: line.split() for line in lines[header + 2:header + 7]}
    assert set(rows) == {"aten::mul", "aten::add", "forward", "aten::sigmoid", "aten::cat"}
    assert rows["aten::mul"][0] == "3" and rows["aten::cat"][0] == "1"


def test_no_profile_unless_asked(predictor: Path, loop_model: Path) -> None:
    run = run_predictor(predictor, loop_model, "--json", "--iters", "1")
    assert run.returncode == 0, run.stderr
    assert "op_profile" not in json.loads(run.stdout)
    assert "--profile-ops" in run_predictor(predictor, "--help").stdout
